import json, sys, time, http.client
port=int(sys.argv[1]); n0=20
c=http.client.HTTPConnection("127.0.0.1",port)
import random; random.seed(); ids=[random.randrange(100,11000) for i in range(n0)]
srv=[]; wall=[]
for k in range(int(sys.argv[2]) if len(sys.argv)>2 else 100):
    body=json.dumps({"top_k":10,"speculate":True,"tokens":ids})
    t=time.time(); c.request("POST","/v1/next-token",body,{"Content-Type":"application/json"}); r=json.loads(c.getresponse().read()); dt=time.time()-t
    if k: srv.append(r["timings"]["total_ms"] if "timings" in r else r.get("total_ms")); wall.append(dt*1e3)
    ids.append(r["candidates"][0]["id"])
    if len(ids)>=400: ids=ids[:n0]
    time.sleep(0.02)
srv.sort(); wall.sort()
print("server p50 %.2f ms wall p50 %.2f ms (n=%d)"%(srv[len(srv)//2], wall[len(wall)//2], len(srv)))
