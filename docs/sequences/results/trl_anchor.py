"""TRL's GRPOTrainer as the anchor of the 3-5-digit reversal table: the same model size, group,
batch, loss and reward as the grpo agent (the trainer is ``build_trainer`` of
pgrad_app/perf/peers/trl_grpo_side.py), trained for as many updates of 64 completions as the
pgrad runs made, then greedy on 200 prompts drawn apart from the training prompts. Run under
the interpreter with torch and TRL:

    /work/venv-trl/bin/python docs/sequences/results/trl_anchor.py '{"steps": 3082, "seed": 0}'

Prints one JSON line and adds it to trl_anchor.json here.
"""
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
SIDE = HERE.parents[2] / "pgrad_app" / "perf" / "peers" / "trl_grpo_side.py"


def load_side():
    spec = importlib.util.spec_from_file_location("trl_grpo_side", SIDE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(arg: str) -> None:
    import torch

    side = load_side()
    s = {**side.DEFAULTS, "threads": 1, "warmup": 0, "prompts": 200_000, **json.loads(arg)}
    max_new = s["max_digits"] + 1
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = side.build_trainer(s, tmp)  # s["steps"] updates: no warm-up here
        trainer.train()
    model, tokenizer = trainer.model, trainer.processing_class
    test = side.reversal_prompts(200, s["min_digits"], s["max_digits"], 10_000 + s["seed"])
    model.eval()
    scores, exact = [], 0
    with torch.no_grad():
        for prompt, answer in zip(test["prompt"], test["answer"]):
            ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
            out = model.generate(ids, do_sample=False, max_new_tokens=max_new)
            text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            scores.append(side.partial_credit(text, answer))
            exact += text == answer
    row = {"seed": s["seed"], "steps": s["steps"], "completions": s["steps"] * s["num_envs"],
           "greedy_return": sum(scores) / len(scores), "success_rate": exact / len(scores),
           "wall_s": round(time.time() - start, 1), "loss_type": s["loss_type"]}
    print(json.dumps(row), flush=True)
    out_file = HERE / "trl_anchor.json"
    rows = json.loads(out_file.read_text()) if out_file.exists() else {}
    rows[f"seed {s['seed']}"] = row
    out_file.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "{}")
