"""Capacity check: can the grpo agent's policy network learn a token task by plain supervised
cross-entropy on the answers (teacher forcing)? The network is the agent's own (built by
``agents.make("grpo", ...)`` at the given sizes); the loss is ``-mean log pi(answer token |
prompt, answer so far)`` over the answer's digits and its end-of-sequence token, from
:func:`pgrad.rl.models.token_encoder.per_token_log_probs`, Adam at the agent's learning rate.
Every ``--eval-every`` steps it decodes 1,000 fresh prompts greedily and prints the exact rate.

    python docs/sequences/results/supervised.py addition2            # reversed 2-digit sums
    python docs/sequences/results/supervised.py reversal35           # 3-5-digit reversal
    python docs/sequences/results/supervised.py addition2 --set d_model=128 --set num_layers=4

Results go to ``supervised.json`` beside this file (one row per task and sizes).
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

import agents
from pgrad.rl.models.token_encoder import per_token_log_probs, policy_logits_fn
from pgrad.rl.tokens import tasks

HERE = Path(__file__).parent

TASKS = {
    "addition2": ("pgrad/Addition-v0", {"digits": 2, "shaping": True, "dense_rewards": True,
                                        "reverse_answer": True}),
    "reversal35": ("pgrad/Reversal-v0", {"min_digits": 3, "max_digits": 5, "shaping": True,
                                         "dense_rewards": True}),
}


def batch(env, rng, n):
    """``n`` prompts with their answers: ``(tokens [n, L], prompt lengths, answer lengths,
    prompt ids, answers)``; the answer is its digits then the end-of-sequence token."""
    tok = env.tokenizer
    ids = np.zeros((n, env.context_len), np.int32)
    plen, alen, prompts, answers = [], [], [], []
    for i in range(n):
        text, answer = env.draw(rng)
        p = tok.encode(text)
        a = [*tok.encode(answer), env.eos_id]
        ids[i, :len(p)] = p
        ids[i, len(p):len(p) + len(a)] = a
        plen.append(len(p))
        alen.append(len(a))
        prompts.append(p)
        answers.append(answer)
    return ids, np.array(plen, np.int32), np.array(alen, np.int32), prompts, answers


def greedy_exact(env, logits_fn, rng, n=1000):
    """The fraction of ``n`` fresh prompts whose greedy completion is the exact answer."""
    _, plen, _, prompts, answers = batch(env, rng, n)
    ctx = np.zeros((n, env.context_len), np.int32)
    for i, p in enumerate(prompts):
        ctx[i, :len(p)] = p
    done = np.zeros(n, bool)
    written: list[list[int]] = [[] for _ in range(n)]
    for t in range(env.max_new_tokens):
        logits = logits_fn(tf.constant(ctx)).numpy()  # [n, L, V]
        nxt = logits[np.arange(n), plen + t - 1].argmax(-1)
        for i in np.flatnonzero(~done):
            tok = int(nxt[i])
            ctx[i, plen[i] + t] = tok
            if tok in (0, env.eos_id):
                done[i] = True
            else:
                written[i].append(tok)
    hits = [env.tokenizer.decode(w) == a for w, a in zip(written, answers)]
    return float(np.mean(hits))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], help="config key=value")
    args = parser.parse_args()
    sizes = {"d_model": 64, "num_layers": 2}
    for item in args.set:
        key, value = item.split("=", 1)
        sizes[key] = type(sizes.get(key, 0))(value) if key in sizes else int(value)
    env_id, env_kwargs = TASKS[args.task]
    tasks.register()
    agent = agents.make("grpo", env_id, seed=args.seed, env_kwargs=env_kwargs, **sizes)
    env = getattr(tasks, tasks.IDS[env_id])(**env_kwargs)
    logits_fn = policy_logits_fn(agent.net)
    variables = agent.net.policy_variables
    opt = tf.keras.optimizers.Adam(agent.cfg.learning_rate)
    rng = np.random.default_rng(args.seed)
    eval_rng = np.random.default_rng(10_000 + args.seed)

    @tf.function
    def train_step(ids, plen, alen):
        with tf.GradientTape() as tape:
            logp = per_token_log_probs(logits_fn, ids, plen, alen)  # [n, L]
            loss = -tf.reduce_sum(logp) / tf.cast(tf.reduce_sum(alen), tf.float32)
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss

    start = time.time()
    curve = []
    for step in range(1, args.steps + 1):
        ids, plen, alen, _, _ = batch(env, rng, args.batch)
        loss = float(train_step(tf.constant(ids), tf.constant(plen), tf.constant(alen)))
        if step % args.eval_every == 0 or step == args.steps:
            exact = greedy_exact(env, logits_fn, eval_rng)
            curve.append({"step": step, "loss": round(loss, 4), "greedy_exact": exact})
            print(f"step {step} loss {loss:.4f} greedy exact {exact:.3f} "
                  f"({time.time() - start:.0f} s)", flush=True)
    label = f"{args.task} " + " ".join(f"{k}={v}" for k, v in sorted(sizes.items())) + \
        f" seed {args.seed}"
    out = HERE / "supervised.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    results[label] = {"task": args.task, "env_kwargs": env_kwargs, "sizes": sizes,
                      "batch": args.batch, "steps": args.steps,
                      "learning_rate": agent.cfg.learning_rate, "seed": args.seed,
                      "parameters": int(sum(np.prod(v.shape) for v in variables)),
                      "curve": curve, "wall_s": round(time.time() - start, 1)}
    out.write_text(json.dumps(results, indent=1))
    agent.close()


if __name__ == "__main__":
    main()
