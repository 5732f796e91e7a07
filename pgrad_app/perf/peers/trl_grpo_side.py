"""TRL's side of the ``grpo_vs_trl`` speed figure: GRPOTrainer on Reversal prompts, timed.

Run as a file under an interpreter that has ``torch``, ``transformers``, ``trl`` and ``datasets``
(it imports nothing of pgrad, whose environment has no torch)::

    /work/venv-trl/bin/python pgrad_app/perf/peers/trl_grpo_side.py '{"steps": 10}'

It builds, locally and without downloads, a character tokenizer with pgrad's ids for the token
tasks (0 pad, 1 end of sequence, then ``"0123456789+="``: V = 14) and a GPT-2 of the given size
(``n_embd = d_model``, ``n_head``, ``n_layer``, ``n_inner = ffn_dim``, ``n_positions`` = the
prompt plus the completion), a dataset of Reversal prompts (``"3141="``, 3-5 digits, drawn with
``seed``) with their answers, and TRL's ``GRPOTrainer`` with the reward of pgrad's
``Reversal(shaping=True)``: the fraction of positions where the completion and the answer agree,
over the longer of the two (1 exactly for the exact answer). One generation per optimizer step
(``steps_per_generation = gradient_accumulation_steps = num_iterations = 1``): each step
samples ``group_size`` completions of ``num_envs / group_size`` prompts (at most
``max_completion_length`` tokens, stopping at the end-of-sequence or the pad token, as pgrad's
env does), scores them and takes one Adam step on them -- what one pgrad GRPO update does.
float32 throughout (``bf16=False``; GRPOConfig's default is bf16); ``threads`` > 0 caps
torch's threads (0: torch's default, one per core).

``warmup`` steps run untimed; the next ``steps`` are timed from the end of the warm-up's last
optimizer step to the end of the last one. Prints one JSON line: ``tokens`` (the completion
tokens of the timed steps, end-of-sequence tokens included: TRL's ``completion_mask`` summed,
which equals pgrad's env steps of those completions), ``wall_s``, ``cpu_s`` (this process's CPU
over the timed steps), ``completions``, ``params``, ``torch_threads`` and the versions.

:func:`build_trainer` is the trainer alone, for other uses of the same setup (the TRL anchor of
the reversal table, ``docs/sequences/results/trl_anchor.py``).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

ALPHABET = "0123456789+="
PAD, EOS = "<pad>", "<eos>"

DEFAULTS = {"d_model": 64, "num_heads": 4, "num_layers": 2, "ffn_dim": 256, "group_size": 8,
            "num_envs": 64, "min_digits": 3, "max_digits": 5, "warmup": 3, "steps": 20,
            "seed": 0, "learning_rate": 1e-3, "loss_type": "dapo", "epsilon": 0.2,
            "max_grad_norm": 1.0, "threads": 0, "prompts": 4096}


def partial_credit(completion: str, answer: str) -> float:
    """pgrad's ``partial_credit``: ``sum_i [c_i == a_i] / max(len(c), len(a), 1)``."""
    hits = sum(c == a for c, a in zip(completion, answer))
    return hits / max(len(completion), len(answer), 1)


def char_tokenizer():
    """A ``PreTrainedTokenizerFast`` with one token per character: 0 pad, 1 eos, then the
    alphabet (pgrad's ``CharTokenizer(ALPHABET)`` ids), no special tokens added on encode."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, EOS: 1, **{c: i + 2 for i, c in enumerate(ALPHABET)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)


def reversal_prompts(n: int, low: int, high: int, seed: int) -> dict[str, list[str]]:
    """``n`` Reversal prompts (``"3141="``) and answers (``"1413"``), digit counts uniform in
    ``[low, high]``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    prompts, answers = [], []
    for _ in range(n):
        digits = "".join(str(d) for d in rng.integers(0, 10, int(rng.integers(low, high + 1))))
        prompts.append(digits + "=")
        answers.append(digits[::-1])
    return {"prompt": prompts, "answer": answers}


def full_spec(spec: dict) -> dict:
    """``spec`` over :data:`DEFAULTS`; an unknown key is a ValueError naming it."""
    unknown = sorted(set(spec) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"trl_grpo_side: unknown spec keys {unknown}; known: {sorted(DEFAULTS)}")
    return {**DEFAULTS, **spec}


def build_trainer(spec: dict, output_dir: str, reward: Callable[..., list[float]] | None = None,
                  callbacks: Sequence[Any] = ()) -> Any:
    """TRL's ``GRPOTrainer`` for ``spec``: the GPT-2, the character tokenizer, the Reversal
    prompts and the GRPO settings of pgrad's ``grpo`` agent (the module's docstring), for
    ``warmup + steps`` optimizer steps. Seeds torch and, with ``threads`` > 0, caps its threads.

    Args:
      spec: keys of :data:`DEFAULTS` (the others default).
      output_dir: TRL's output directory (nothing is saved there; a temporary one will do).
      reward: TRL's reward function ``(prompts, completions, answer=..., completion_ids=...,
        **kwargs) -> [reward per completion]``; None: :func:`partial_credit` against the answer.
      callbacks: ``transformers.TrainerCallback`` instances.

    Returns:
      The trainer (``trainer.model`` the GPT-2, ``trainer.processing_class`` the tokenizer).
    """
    import torch
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel
    from trl import GRPOConfig, GRPOTrainer

    s = full_spec(spec)
    torch.manual_seed(s["seed"])
    if s["threads"]:  # else torch's default, one per core
        torch.set_num_threads(int(s["threads"]))
    tokenizer = char_tokenizer()
    max_new = s["max_digits"] + 1  # the answer and the end-of-sequence token (pgrad's env)
    prompt_len = s["max_digits"] + 1
    config = GPT2Config(vocab_size=len(ALPHABET) + 2, n_positions=prompt_len + max_new,
                        n_embd=s["d_model"], n_head=s["num_heads"], n_layer=s["num_layers"],
                        n_inner=s["ffn_dim"], bos_token_id=1, eos_token_id=1, pad_token_id=0)
    model = GPT2LMHeadModel(config)
    model.generation_config.eos_token_id = [1, 0]  # pgrad's env ends on either
    model.generation_config.pad_token_id = 0

    def answer_reward(prompts, completions, answer, **kwargs):
        return [partial_credit(c, a) for c, a in zip(completions, answer)]

    args = GRPOConfig(
        output_dir=output_dir, report_to="none", use_cpu=True, bf16=False, fp16=False,
        num_generations=s["group_size"], per_device_train_batch_size=s["num_envs"],
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        max_completion_length=max_new, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=s["learning_rate"], lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=0.0, max_grad_norm=s["max_grad_norm"], loss_type=s["loss_type"],
        epsilon=s["epsilon"], beta=0.0, max_steps=s["warmup"] + s["steps"],
        logging_steps=10**9, save_strategy="no", disable_tqdm=True, seed=s["seed"],
        dataloader_num_workers=0, log_completions=False)
    prompts = reversal_prompts(s["prompts"], s["min_digits"], s["max_digits"], s["seed"])
    return GRPOTrainer(model=model, reward_funcs=reward or answer_reward, args=args,
                       train_dataset=Dataset.from_dict(prompts), processing_class=tokenizer,
                       callbacks=list(callbacks))


def run(spec: dict) -> dict:
    """The timed run: :func:`build_trainer`, ``warmup`` steps untimed, ``steps`` timed; the
    JSON record of the module's docstring."""
    s = full_spec(spec)  # before torch is imported: a bad key costs nothing
    import torch
    import transformers
    import trl
    from transformers import TrainerCallback

    counted = {"tokens": 0, "completions": 0, "calls": 0}
    timing: dict[str, float] = {}

    def reversal_reward(prompts, completions, completion_ids, answer, **kwargs):
        counted["calls"] += 1
        if counted["calls"] > s["warmup"]:  # a timed step's generation
            counted["tokens"] += sum(len(ids) for ids in completion_ids)
            counted["completions"] += len(completion_ids)
        return [partial_credit(c, a) for c, a in zip(completions, answer)]

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == s["warmup"]:
                timing["start"] = time.perf_counter()
                timing["cpu0"] = _cpu()
            elif state.global_step == s["warmup"] + s["steps"]:
                timing["end"] = time.perf_counter()
                timing["cpu1"] = _cpu()

    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(s, tmp, reversal_reward, [Clock()])
        trainer.train()
    if "start" not in timing or "end" not in timing:
        raise RuntimeError(f"trl_grpo_side: the trainer stopped before step "
                           f"{s['warmup'] + s['steps']} (timing {timing})")
    return {"side": "trl", "tokens": counted["tokens"], "completions": counted["completions"],
            "wall_s": round(timing["end"] - timing["start"], 4),
            "cpu_s": round(timing["cpu1"] - timing["cpu0"], 4), "steps": s["steps"],
            "params": sum(p.numel() for p in trainer.model.parameters()),
            "torch_threads": torch.get_num_threads(),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "trl": trl.__version__}}


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: trl_grpo_side.py '<JSON spec>'", file=sys.stderr)
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print(json.dumps(run(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
