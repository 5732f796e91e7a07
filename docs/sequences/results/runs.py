"""The 3-seed tables of docs/sequences/agents.md past 2-digit reversal: each run through
pgrad-train with its run directory (a run cut short resumes from its checkpoint on the next
call), then pgrad-evaluate greedy on 200 episodes; one JSON per table here.

    python docs/sequences/results/runs.py reversal35 [--out DIR]   # 3-5-digit reversal, 1M
    python docs/sequences/results/runs.py addition2 [--out DIR]    # 2-digit addition
    python docs/sequences/results/runs.py addition2_long --seeds 0  # the same, 6M tokens
    python docs/sequences/results/runs.py addition2_8m --seeds 0    # that run, on to 8M
    python docs/sequences/results/runs.py addition2_entsched --seeds 1  # ent_coef 0.3 -> 0.03
    python docs/sequences/results/runs.py addition2_group4 --seeds 1  # groups of 4, 6M

A table with ``from`` continues the runs of another table: each of its runs starts as a copy of
that table's run directory for the same variant and seed (which must exist), resumed to this
table's ``steps``, so the shorter run's row stays as it was.

--seeds and --variants pick runs (e.g. --seeds 0 --variants "position, gamma 0" for a screen);
a row already in the JSON is not run again.
"""
import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
COMMON = ["--agent", "grpo", "--set", "d_model=64", "--set", "num_layers=2", "--quiet"]
#: process supervision with the per-position baseline and each token's own reward
POSITION0 = ["--set", "supervision=process", "--set", "process_baseline=position", "--set",
             "gamma=0"]
#: reversed 2-digit addition with dense partial credit (every addition table's env)
ADDITION2 = ["--env", "pgrad/Addition-v0", "--env-kwargs", "digits=2", "shaping=true",
             "dense_rewards=true", "reverse_answer=true"]
TABLES = {
    "reversal35": {
        "env": ["--env", "pgrad/Reversal-v0", "--env-kwargs", "min_digits=3", "max_digits=5",
                "shaping=true", "dense_rewards=true"],
        "steps": 1_000_000,
        "variants": {
            "outcome (dapo)": [],
            "process (dapo)": ["--set", "supervision=process"],
            "process, ent_coef 0.01": ["--set", "supervision=process", "--set",
                                       "ent_coef=0.01"],
            "process, position baseline, gamma 0": POSITION0,
            "position, gamma 0, ent_coef 0.05": [*POSITION0, "--set", "ent_coef=0.05"],
            "position, gamma 0, ent_coef 0.1": [*POSITION0, "--set", "ent_coef=0.1"],
            "position, gamma 0, ent_coef 0.2": [*POSITION0, "--set", "ent_coef=0.2"],
            "position, gamma 0, ent_coef 0.2, epochs 2": [*POSITION0, "--set", "ent_coef=0.2",
                                                          "--set", "epochs=2"],
            "position, gamma 0, ent_coef 0.3": [*POSITION0, "--set", "ent_coef=0.3"],
            "position, gamma 0, ent_coef 0.3, group 16": [*POSITION0, "--set", "ent_coef=0.3",
                                                          "--set", "group_size=16"],
            # the addition recipe (groups of 4: 16 prompts per update) on reversal
            "position, gamma 0, ent_coef 0.3, group 4": [*POSITION0, "--set", "ent_coef=0.3",
                                                         "--set", "group_size=4"],
        },
    },
    "addition2": {
        "env": ADDITION2,
        "steps": 1_000_000,
        "variants": {
            "process (dapo)": ["--set", "supervision=process"],
            "process, ent_coef 0.01": ["--set", "supervision=process", "--set",
                                       "ent_coef=0.01"],
            "position, gamma 0, ent_coef 0.1": [*POSITION0, "--set", "ent_coef=0.1"],
            "position, gamma 0": POSITION0,
            "position, gamma 0, ent_coef 0.01": [*POSITION0, "--set", "ent_coef=0.01"],
            "position, gamma 0, ent_coef 0.3, group 16": [*POSITION0, "--set", "ent_coef=0.3",
                                                          "--set", "group_size=16"],
            # a seed-0 screen: one setting at a time on the recipe
            "ent_coef 0.3, group 4": [*POSITION0, "--set", "ent_coef=0.3", "--set",
                                      "group_size=4"],
            "ent_coef 0.3, group 16, 256 envs": [*POSITION0, "--set", "ent_coef=0.3", "--set",
                                                 "group_size=16", "--set", "num_envs=256"],
            "ent_coef 0.3, group 16, lr 3e-3": [*POSITION0, "--set", "ent_coef=0.3", "--set",
                                                "group_size=16", "--set",
                                                "learning_rate=0.003"],
        },
    },
    # the recipe for longer: how many tokens addition needs
    "addition2_long": {
        "env": ADDITION2,
        "steps": 6_000_000,
        "variants": {
            "position, gamma 0, ent_coef 0.3, group 16": [*POSITION0, "--set", "ent_coef=0.3",
                                                          "--set", "group_size=16"],
        },
    },
    # the 6M runs above, each resumed from its last checkpoint on to 8M
    "addition2_8m": {"from": "addition2_long", "steps": 8_000_000},
    # the recipe with its entropy bonus decaying linearly from 0.3 to 0.03 over the run: with
    # ent_coef 0.3 and a right digit worth 1/3, the regularised optimum of a digit the policy
    # has not learned puts only ~25% on the right one (seed 1 never learned the units digit)
    "addition2_entsched": {
        "env": ADDITION2,
        "steps": 6_000_000,
        "variants": {
            "position, gamma 0, ent_coef lin_0.3_0.03, group 16": [
                *POSITION0, "--set", "ent_coef=lin_0.3_0.03", "--set", "group_size=16"],
        },
    },
    # the recipe with groups of 4 (16 prompts per update of 64 completions): the expected
    # gradient a prompt gives a digit the policy has not learned is about p(right) times its
    # cross-entropy gradient whatever the group's size, so four times the prompts per token is
    # about four times the signal per token (the 1M screen above stopped before any seed clicks)
    "addition2_group4": {
        "env": ADDITION2,
        "steps": 6_000_000,
        "variants": {
            "position, gamma 0, ent_coef 0.3, group 4": [*POSITION0, "--set", "ent_coef=0.3",
                                                         "--set", "group_size=4"],
        },
    },
}
for _table in TABLES.values():  # a continuing table runs the variants of the one it continues
    if "from" in _table:
        _table.update({k: TABLES[_table["from"]][k] for k in ("env", "variants")})


def slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label).strip("_")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--out", default="runs/sequences", help="where the run dirs go")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=None, help="labels to run (all)")
    args = parser.parse_args()
    table = TABLES[args.table]
    result_file = HERE / f"{args.table}.json"
    results = json.loads(result_file.read_text()) if result_file.exists() else {}
    for label, options in table["variants"].items():
        if args.variants and label not in args.variants:
            continue
        for seed in args.seeds:
            key = f"{label} seed {seed}"
            if key in results:
                continue
            run = Path(args.out) / args.table / f"{slug(label)}_s{seed}"
            start = time.time()
            if "from" in table and not run.exists():
                source = Path(args.out) / table["from"] / run.name
                if not (source / "checkpoints").exists():
                    sys.exit(f"{args.table} continues {source}, which has no checkpoint: run "
                             f"`runs.py {table['from']} --seeds {seed}` first")
                shutil.copytree(source, run)
            if (run / "checkpoints").exists():
                # on to this table's total (a run that reached it says so and stops)
                cmd = [str(BIN / "pgrad-train"), "--resume", str(run), "--total-steps",
                       str(table["steps"]), "--quiet"]
            else:
                cmd = [str(BIN / "pgrad-train"), *COMMON, *table["env"], *options,
                       "--total-steps", str(table["steps"]), "--seed", str(seed),
                       "--out", str(run)]
            # a resumed run that had already reached its total says so and stops: evaluate it
            subprocess.run(cmd, check=cmd[1] != "--resume")
            subprocess.run([str(BIN / "pgrad-evaluate"), str(run), "--episodes", "200"],
                           check=True, stdout=subprocess.DEVNULL)
            ev = json.loads((run / "eval.json").read_text())
            results[key] = {"variant": label, "seed": seed, "command": " ".join(cmd[1:]),
                            "greedy_return": ev["return_mean"],
                            "success_rate": ev.get("success_rate"),
                            "wall_s_this_call": round(time.time() - start, 1)}
            # merge with what other drivers of the same table wrote meanwhile
            on_disk = json.loads(result_file.read_text()) if result_file.exists() else {}
            results = {**on_disk, key: results[key]}
            result_file.write_text(json.dumps(results, indent=1))
            print(key, results[key], flush=True)


if __name__ == "__main__":
    main()
