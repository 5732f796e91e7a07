"""TRL's GRPOTrainer as the anchor of the 3-5-digit reversal table: the same model size, group,
batch, loss and reward as the grpo agent (pgrad_app/perf/peers/trl_grpo_side.py builds them), trained
for as many updates of 64 completions as the pgrad runs made, then greedy on 200 prompts drawn
apart from the training prompts. Run under the interpreter with torch and TRL:

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
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel
    from trl import GRPOConfig, GRPOTrainer

    side = load_side()
    s = {**side.DEFAULTS, "threads": 1, "prompts": 200_000, **json.loads(arg)}
    torch.manual_seed(s["seed"])
    torch.set_num_threads(int(s["threads"]))
    tokenizer = side.char_tokenizer()
    max_new = prompt_len = s["max_digits"] + 1
    config = GPT2Config(vocab_size=len(side.ALPHABET) + 2, n_positions=prompt_len + max_new,
                        n_embd=s["d_model"], n_head=s["num_heads"], n_layer=s["num_layers"],
                        n_inner=s["ffn_dim"], bos_token_id=1, eos_token_id=1, pad_token_id=0)
    model = GPT2LMHeadModel(config)
    model.generation_config.eos_token_id = [1, 0]
    model.generation_config.pad_token_id = 0

    def reward(prompts, completions, answer, **kwargs):
        return [side.partial_credit(c, a) for c, a in zip(completions, answer)]

    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp, report_to="none", use_cpu=True, bf16=False, fp16=False,
            num_generations=s["group_size"], per_device_train_batch_size=s["num_envs"],
            gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
            max_completion_length=max_new, temperature=1.0, top_p=1.0, top_k=0,
            learning_rate=s["learning_rate"], lr_scheduler_type="constant", warmup_steps=0,
            weight_decay=0.0, max_grad_norm=s["max_grad_norm"], loss_type=s["loss_type"],
            epsilon=s["epsilon"], beta=0.0, max_steps=s["steps"], logging_steps=10**9,
            save_strategy="no", disable_tqdm=True, seed=s["seed"], dataloader_num_workers=0,
            log_completions=False)
        data = side.reversal_prompts(s["prompts"], s["min_digits"], s["max_digits"], s["seed"])
        GRPOTrainer(model=model, reward_funcs=reward, args=args,
                    train_dataset=Dataset.from_dict(data), processing_class=tokenizer).train()
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
