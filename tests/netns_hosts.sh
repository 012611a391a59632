# shellcheck shell=sh disable=SC2034 # (nh_why, nh_dir: read by the scripts that source this)
# netns_hosts.sh — "hosts" for multi-host tests and benches, sourced by them (sh): network
# namespaces, each with its own host name, joined by veth pairs to one bridge, and an rsh
# agent through which mpirun starts its daemons in them. Only addresses of the test range
# 198.18.0.0/24 (RFC 2544's benchmarking range) are ever used, inside the namespaces; the
# bridge in the caller's namespace has no address, so nothing can leave.
#
#   nh_probe                  0 when network namespaces can be made here (root, not forbidden
#                             by the container), else 1 with the reason in $nh_why
#   nh_up N WORKDIR           hosts 0..N-1: namespace ${nh_id}h$i, host name kg-h$i, address
#                             198.18.0.$((i + 1)) on its eth0, the other end of the veth
#                             ${nh_id}v$i on bridge ${nh_id}br; WORKDIR/rsh is the agent
#   nh_in I CMD...            runs CMD in host I (its namespace and host name)
#   nh_mpirun ARGS...         mpirun in host 0 over TCP on the veths only (the launcher's
#                             daemons and the ranks' traffic), ARGS after its own options
#   nh_hosts N                "198.18.0.1:1,198.18.0.2:1,...": one slot per host, for -H
#   nh_veth_bytes I           bytes host I's veth moved (received + sent, as the bridge sees it)
#   nh_down                   kills what runs in the hosts, removes them, the veths and bridge
# Callers run `trap nh_down EXIT` (or call it from their own trap) right after nh_up.
nh_id=kg$$
nh_n=0
nh_why=

nh_probe() {
  [ "$(id -u)" = 0 ] || { nh_why="not root (ip netns add needs CAP_SYS_ADMIN)"; return 1; }
  command -v ip >/dev/null 2>&1 || { nh_why="no ip command (apt-get install iproute2)"; return 1; }
  command -v unshare >/dev/null 2>&1 || { nh_why="no unshare (util-linux)"; return 1; }
  if ! out=$(ip netns add "${nh_id}probe" 2>&1); then
    nh_why="ip netns add failed here: $out"; return 1
  fi
  out=$(ip link add "${nh_id}pb" type bridge 2>&1) || {
    ip netns del "${nh_id}probe"; nh_why="ip link add type bridge failed here: $out"; return 1; }
  ip link del "${nh_id}pb"
  out=$(ip netns exec "${nh_id}probe" unshare --uts true 2>&1) || {
    ip netns del "${nh_id}probe"; nh_why="unshare --uts failed here: $out"; return 1; }
  ip netns del "${nh_id}probe"
}

nh_up() {
  nh_n=$1
  nh_dir=$2
  ip link add "${nh_id}br" type bridge
  ip link set "${nh_id}br" up
  i=0
  while [ $i -lt "$nh_n" ]; do
    ip netns add "${nh_id}h$i"
    ip link add "${nh_id}v$i" type veth peer name eth0 netns "${nh_id}h$i"
    ip link set "${nh_id}v$i" master "${nh_id}br" up
    ip -n "${nh_id}h$i" addr add "198.18.0.$((i + 1))/24" dev eth0
    ip -n "${nh_id}h$i" link set eth0 up
    ip -n "${nh_id}h$i" link set lo up
    i=$((i + 1))
  done
  # mpirun's rsh agent: "rsh HOST COMMAND..." runs COMMAND (a shell line: Open MPI's daemon
  # with its environment) in that host's namespace under its host name
  cat > "$nh_dir/rsh" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
i=\$((\${host##*.} - 1))
exec ip netns exec "${nh_id}h\$i" unshare --uts sh -c 'hostname "kg-h\$0"; exec sh -c "\$*"' "\$i" "\$@"
EOF
  chmod +x "$nh_dir/rsh"
}

nh_in() {
  i=$1
  shift
  ip netns exec "${nh_id}h$i" unshare --uts sh -c 'hostname "kg-h$0"; exec "$@"' "$i" "$@"
}

nh_hosts() {
  h=''
  i=0
  while [ $i -lt "$1" ]; do h="$h${h:+,}198.18.0.$((i + 1)):1"; i=$((i + 1)); done
  echo "$h"
}

# OpenMPI: the TCP transport alone (no shared memory: one rank per host anyway), its daemons'
# out-of-band channel and the ranks' messages on 198.18.0.0/24, the daemons started by our
# agent, root allowed (the tests run as root)
nh_mpirun() {
  nh_in 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --mca plm_rsh_agent "$nh_dir/rsh" --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include 198.18.0.0/24 --mca oob_tcp_if_include 198.18.0.0/24 \
    --mca plm_rsh_no_tree_spawn 1 --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 \
    --mca oob_tcp_keepalive_probes 3 "$@"
}

nh_veth_bytes() {
  s=/sys/class/net/${nh_id}v$1/statistics
  echo $(($(cat "$s/rx_bytes") + $(cat "$s/tx_bytes")))
}

nh_down() {
  i=0
  while [ $i -lt "$nh_n" ]; do
    for p in $(ip netns pids "${nh_id}h$i" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    i=$((i + 1))
  done
  i=0
  while [ $i -lt "$nh_n" ]; do
    ip link del "${nh_id}v$i" 2>/dev/null || true
    ip netns del "${nh_id}h$i" 2>/dev/null || true
    i=$((i + 1))
  done
  ip link del "${nh_id}br" 2>/dev/null || true
  nh_n=0
}
