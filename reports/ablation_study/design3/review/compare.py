"""Compare recompute.py's recomputed.json (in $REVIEW_OUT, default /tmp) with the suite's analysis.json and per-cell diversity_per_problem.jsonl."""
import json, os
RUNS = "reports/ablation_study/design3/runs"
me = json.load(open(os.path.join(os.environ.get("REVIEW_OUT", "/tmp"), "recomputed.json")))
su = json.load(open(f"{RUNS}/report/analysis.json"))
disc = []
def cmp(label, a, b, tol):
    if a is None or b is None:
        if a != b: disc.append(f"{label}: mine={a} suite={b}")
        return
    if abs(a - b) > tol: disc.append(f"{label}: mine={a:.8g} suite={b:.8g} d={a-b:.3g}")
print("| claim | diff (mine/suite) | 95% CI mine | 95% CI suite | p mine/suite | Holm mine/suite | verdict mine/suite |")
for m, s in zip(me["claims"], su["claims"]):
    assert (m["a"], m["b"], m["metric"]) == (s["a"], s["b"], s["metric"])
    tol = 1e-4 if "emb" in m["metric"] else 1e-6
    L = f'{m["a"]}-{m["b"]} {m["metric"]}'
    for k in ["diff", "p", "p_holm"]: cmp(f"{L} {k}", m[k], s[k], tol)
    for i in range(2): cmp(f"{L} ci95[{i}]", m["ci95"][i], s["ci95"][i], tol)
    if m["verdict"] != s["verdict"]: disc.append(f"{L} verdict mine={m['verdict']} suite={s['verdict']}")
    if m["problems"] != s["problems"]: disc.append(f"{L} problems mine={m['problems']} suite={s['problems']}")
    for sd, v in m["seed_diffs"].items(): cmp(f"{L} seed {sd}", v, s["seed_diffs"].get(str(sd)), tol)
    print(f'| {L} | {m["diff"]:+.5f} / {s["diff"]:+.5f} | [{m["ci95"][0]:+.4f}, {m["ci95"][1]:+.4f}] | [{s["ci95"][0]:+.4f}, {s["ci95"][1]:+.4f}] | {m["p"]:.4f} / {s["p"]:.4f} | {m["p_holm"]:.4f} / {s["p_holm"]:.4f} | {m["verdict"]} / {s["verdict"]} |')
sarms = {a["arm"]: a for a in su["arms"]}
for arm, seeds in me["per_arm"].items():
    for met in ["avg@n", "d_eq_correct", "d_emb_correct"]:
        tol = 1e-4 if "emb" in met else 1e-6
        vals = [seeds[s][met] for s in seeds]
        for s in seeds: cmp(f"arm {arm} seed {s} {met}", seeds[s][met], sarms[arm]["per_seed"][str(s)][met], tol)
        cmp(f"arm {arm} mean {met}", sum(vals) / len(vals), sarms[arm][met]["mean"], tol)
shw = {h["arm"]: h for h in su["hack_watch"]}
for key, v in me["hack_watch"].items():
    arm, s = key.split("/")
    for k in v: cmp(f"hack {key} {k}", v[k], shw[arm]["per_seed"][s][k], 1e-9)
arms = sorted({k.split("/")[0] for k in me["hack_watch"]})
for arm in arms:
    for k in ["unbalanced_dollar", "after_answer", "hit_cap"]:
        vals = [v[k] for kk, v in me["hack_watch"].items() if kk.split("/")[0] == arm]
        cmp(f"hack {arm} mean {k}", sum(vals) / len(vals), shw[arm][k]["mean"], 1e-9)
# per-cell vs diversity_per_problem.jsonl
ncell = nclose = 0
for key, cells in me["cells"].items():
    arm, s = key.split("/")
    p = f"{RUNS}/base/diversity_per_problem.jsonl" if arm == "base" else f"{RUNS}/{arm}/s{s}/sweep/step_000016/diversity_per_problem.jsonl"
    for line in open(p):
        r = json.loads(line); c = cells[r["problem_id"]]; sc = r["correct"]
        ncell += 1
        if r["n_correct"] != c["n_correct"]: disc.append(f"cell {key} {r['problem_id']} n_correct mine={c['n_correct']} suite={r['n_correct']}")
        if "d_eq_correct" in c:
            cmp(f"cell {key} {r['problem_id']} d_eq", c["d_eq_correct"], sc.get("d_eq"), 1e-6)
            cmp(f"cell {key} {r['problem_id']} d_emb", c["d_emb_correct"], sc.get("d_emb"), 1e-4)
            if abs(c["d_eq_correct"] - c["d_eq_correct_noclose"]) > 1e-12: nclose += 1
print(f"\ncells compared: {ncell}; cells whose D_eq changes without the open-$ rule: {nclose}")
print("\nDISCREPANCIES:", len(disc)); print("\n".join(disc) if disc else "none")
