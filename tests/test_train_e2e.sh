#!/bin/sh
# test_train_e2e.sh — a CI-sized run: a tiny model on the fixture corpus for 60 steps; the
# loss must fall (mean of the last 5 steps at least 1.5 nats below the first step's), a
# validation line with bits-per-byte must appear, and the checkpoint (and its f16 export)
# must be served by `kogpt2 next`. Also: fp16 loss scaling against f32 on the CPU, the f16
# overflow message only in fp16 runs, --out paths and usage errors.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_e2e.XXXXXX)
trap 'rm -rf "$w"' EXIT
"$B/kogpt2-train" train --data "$fx/data" --tokenizer "$fx/tok.model" --n-layer 2 --n-embd 64 \
  --n-head 4 --n-ctx 64 --steps 60 --batch 8 --seq 32 --lr 3e-3 --warmup 5 --val-every 30 \
  --save-every 30 --threads 2 --out "$w/ck" | tee "$w/log" | grep -E '^(step [0-9]*0/|val|model)'
awk '/^step/ { n++; l[n] = $4 } END {
  last = (l[n] + l[n-1] + l[n-2] + l[n-3] + l[n-4]) / 5;
  printf "loss: first %.3f, mean of last 5 %.3f\n", l[1], last;
  exit !(n == 60 && last < l[1] - 1.5) }' "$w/log"
grep -q '^val step 60 loss .* bpb ' "$w/log"
"$B/kogpt2" next --model "$w/ck" --tokens 5,6,7 --top-k 5
"$B/kogpt2-train" export --from "$w/ck" --out "$w/f16"
"$B/kogpt2" next --model "$w/f16" --tokens 5,6,7 --top-k 5 > "$w/f16.out"
[ -f "$w/f16/tok.model" ] && [ ! -f "$w/f16/train_state.bin" ]
"$B/weights_cmp" "$w/ck" "$w/f16" 1e-3
# fine-tuning starts from a model directory (the f16 export here) with its own shape
"$B/kogpt2-train" train --data "$fx/data" --init "$w/f16" --steps 3 --batch 4 --seq 32 \
  --lr 1e-4 --val-every 0 --threads 2 --out "$w/ft" > "$w/ft.log"
grep -q '^model: L=2 C=64' "$w/ft.log" && grep -q '^step 3/3' "$w/ft.log"
echo "fine-tune from f16 export: $(grep '^step 1/' "$w/ft.log" | cut -d' ' -f1-4)"
# fp16 loss scaling multiplies the loss by 2^16 and divides it out again: on the CPU, which
# computes in f32, that is exact up to rounding of tiny gradients, so the losses agree with
# plain f32 to 1e-5 (printed to 6 decimals); the device line says what ran. bf16 on the CPU
# trains in f32 (its bf16 kernel is forward-only), so its losses and norms equal f32's exactly
for p in f32 fp16 bf16; do
  "$B/kogpt2-train" train --data "$fx/data" --tokenizer "$fx/tok.model" --n-layer 2 --n-embd 32 \
    --n-head 2 --n-ctx 32 --steps 8 --batch 4 --seq 16 --val-every 0 --threads 2 --device cpu \
    --precision $p --out "$w/p_$p" > "$w/p_$p.log"
done
grep -q '^device: cpu' "$w/p_fp16.log" && grep -q 'applies on a GPU' "$w/p_fp16.log"
# (the gradient norm too: an unscaled norm would be 65536 times larger and clip every step)
grep '^step' "$w/p_f32.log" | cut -d' ' -f4,8 > "$w/l32"
grep '^step' "$w/p_fp16.log" | cut -d' ' -f4,8 > "$w/l16"
grep '^step' "$w/p_bf16.log" | cut -d' ' -f4,8 > "$w/lbf"
grep -q 'applies on a GPU' "$w/p_bf16.log" && cmp "$w/l32" "$w/lbf" ||
  { echo "FAIL: bf16 on the CPU did not train as f32"; paste "$w/l32" "$w/lbf"; exit 1; }
paste -d' ' "$w/l32" "$w/l16" | awk '{ n++; d = $1 - $3; if (d < 0) d = -d; if (d > m) m = d
    r = ($2 - $4) / $2; if (r < 0) r = -r; if (r > q) q = r }
  END { printf "fp16 loss scaling vs f32: %d steps, max |d loss| %g, max rel d norm %g\n", n, m, q
        exit !(n == 8 && m <= 1e-5 && q <= 1e-4) }'
# "gradients overflowed in f16" is for fp16 runs only (issue 13): an absurd learning rate makes
# the second step's gradients non-finite; an f32 run names the norm, an fp16 run its overflow
for p in f32 fp16; do
  "$B/kogpt2-train" train --data "$fx/data" --tokenizer "$fx/tok.model" --n-layer 1 --n-embd 16 \
    --n-head 2 --n-ctx 16 --steps 3 --batch 2 --seq 8 --val-every 0 --threads 2 --device cpu \
    --precision $p --lr 1e30 --out "$w/inf_$p" > "$w/inf_$p.log" 2>&1 || true
done
grep -q '^step 2: the gradient norm is .*: step skipped' "$w/inf_f32.log" &&
  ! grep -q 'overflowed in f16' "$w/inf_f32.log" "$w/p_f32.log" &&
  grep -q '^step 2: gradients overflowed in f16: step skipped' "$w/inf_fp16.log" ||
  { echo "FAIL: the f16 overflow message in an f32 run, or missing in fp16"; cat "$w/inf_f32.log" "$w/inf_fp16.log"; exit 1; }
# --out with a trailing slash saves (and exports) as without; an output path that cannot be
# written fails before the first step, not after the run at its first save (issue 13)
tiny="--tokenizer $fx/tok.model --n-layer 1 --n-embd 16 --n-head 2 --n-ctx 16 --batch 2 --seq 8"
# shellcheck disable=SC2086 # one word per flag
"$B/kogpt2-train" train --data "$fx/data" $tiny --steps 2 --save-every 1 --val-every 0 \
  --threads 2 --out "$w/slash/" > "$w/slash.log"
"$B/kogpt2-train" export --from "$w/slash/" --out "$w/slash_f16/" >> "$w/slash.log"
[ -f "$w/slash/train_state.bin" ] && [ -f "$w/slash_f16/model.safetensors" ] ||
  { echo "FAIL: --out DIR/ did not save"; cat "$w/slash.log"; exit 1; }
rc=0
# shellcheck disable=SC2086
"$B/kogpt2-train" train --data "$fx/data" $tiny --steps 2 --val-every 0 --threads 2 \
  --out "$w/no/such/dir" > "$w/nodir.log" 2>&1 || rc=$?
[ $rc = 1 ] && ! grep -q '^step 1/' "$w/nodir.log" && grep -q 'cannot write checkpoints' "$w/nodir.log" ||
  { echo "FAIL: an unwritable --out gave $rc"; cat "$w/nodir.log"; exit 1; }
rc=0; "$B/kogpt2-train" train --data "$fx/data" --out "$w/x" --tokenizer "$fx/tok.model" \
  --steps 1 --precision fp8 2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "FAIL: --precision fp8 gave $rc"; exit 1; }
rc=0; "$B/kogpt2-train" train --data "$fx/data" --out "$w/x" --tokenizer "$fx/tok.model" \
  --steps 1 --device tpu 2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "FAIL: --device tpu gave $rc"; exit 1; }
# usage errors exit 2 before touching anything
rc=0; "$B/kogpt2-train" train --data "$fx/data" --out "$w/x" --steps 1 2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "FAIL: a new model without --tokenizer gave $rc"; exit 1; }
rc=0; "$B/kogpt2-train" train --data "$fx/data" --out "$w/x" --init "$w/ck" --n-layer 2 \
  2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "FAIL: --init with --n-layer gave $rc"; exit 1; }
rc=0; "$B/kogpt2-train" prepare --out "$w/x" 2>/dev/null || rc=$?
[ $rc = 2 ] || { echo "FAIL: prepare without inputs gave $rc"; exit 1; }
# a build without MPI refuses to run as one of several ranks
if [ "${KG_MPI:-OFF}" != ON ]; then
  rc=0; OMPI_COMM_WORLD_SIZE=2 "$B/kogpt2-train" train --data "$fx/data" --out "$w/x" \
    --tokenizer "$fx/tok.model" --steps 1 2>"$w/mpi.err" || rc=$?
  [ $rc = 1 ] && grep -q 'built without MPI' "$w/mpi.err" || { echo "FAIL: ran as 2 ranks"; exit 1; }
fi
[ ! -e "$w/x" ]
echo PASS
