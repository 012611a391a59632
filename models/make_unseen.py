# unseen.txt: natural Korean sentences from the KLUE dev sets (never trained on), deduplicated
import json, re, sys, collections
C = sys.argv[1]
out, seen, src = [], set(), collections.Counter()
def add(s, tag):
    s = " ".join(s.split())
    if len(s) < 10 or s in seen: return
    seen.add(s); out.append(s); src[tag] += 1
for line in open(f"{C}/klue_dev/klue-dp-v1.1_dev.tsv", encoding="utf-8"):
    if line.startswith("## klue-dp"): add(line.split("\t", 1)[1], "klue-dp")
for line in open(f"{C}/klue_dev/klue-ner-v1.1_dev.tsv", encoding="utf-8"):
    if line.startswith("## klue-ner"):
        add(re.sub(r"<([^<>:]+):[A-Z]{2}>", r"\1", line.split("\t", 1)[1]), "klue-ner")
for r in json.load(open(f"{C}/klue_dev/klue-sts-v1.1_dev.json", encoding="utf-8")):
    add(r["sentence1"], "klue-sts"); add(r["sentence2"], "klue-sts")
for r in json.load(open(f"{C}/klue_dev/klue-nli-v1.1_dev.json", encoding="utf-8")):
    if r["source"] in ("nsmc", "wikinews"): continue  # the training corpora hold NSMC reviews and Wikinews
    add(r["premise"], "klue-nli"); add(r["hypothesis"], "klue-nli")
sys.stdout.write("\n".join(out) + "\n")
print(dict(src), len(out), file=sys.stderr)
