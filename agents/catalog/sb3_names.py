"""Stable-Baselines3's keyword names on pgrad's API: mapped where pgrad has the same thing, else
refused in one line naming pgrad's way (see docs/migration.md)."""

from __future__ import annotations

from typing import Any

#: SB3 constructor keyword -> pgrad hyperparameter of the same meaning.
RENAMED = {"n_envs": "num_envs", "batch_size": "minibatch_size", "n_epochs": "epochs"}
#: SB3 keywords pgrad has no field for -> what to do instead.
POINTERS = {
    "verbose": "pgrad shows a progress bar; learn(..., progress=False) hides it",
    "policy": "pgrad picks the network from the observation space (encoder='auto'); MlpPolicy "
              "and CnnPolicy need no name",
    "device": "pgrad runs on TensorFlow's default device (CUDA_VISIBLE_DEVICES picks it)",
    "reset_num_timesteps": "learn(N) always adds N steps to the agent's counter",
    "tb_log_name": "agents.make(..., tensorboard_log=DIR) writes DIR/CLASS_k; a named run: "
                   "pgrad_app.RunDirectory('runs/NAME')",
    "log_interval": "pgrad_app.RunDirectory(..., log_every=N) (pgrad-train --log-every N) sets "
                    "the logging cadence",
}
#: policy_kwargs keys -> hyperparameters.
POLICY_KWARGS = {"log_std_init": "log_std_init", "ortho_init": "ortho_init",
                 "squash_output": "squash", "share_features_extractor": "share_encoder"}
ACTIVATIONS = ("tanh", "relu")


def activation_name(fn: Any) -> str:
    """``"tanh"`` / ``"relu"`` for a string, a function (tf.nn.relu, keras.activations.tanh) or
    a class such as torch's ``nn.Tanh``."""
    name = fn if isinstance(fn, str) else getattr(fn, "__name__", type(fn).__name__)
    name = name.lower()
    if name not in ACTIVATIONS:
        raise ValueError(f"policy_kwargs activation_fn {fn!r}: pgrad's acting path supports "
                         f"{' and '.join(ACTIVATIONS)} (activation='tanh' or 'relu').")
    return name


def net_arch(arch: Any) -> dict[str, tuple[int, ...]]:
    """SB3's ``net_arch`` -> pgrad's fields: ``[64, 64]`` -> ``hidden`` (actor and critic);
    ``dict(pi=[64, 64], vf=[256, 256])`` -> ``hidden`` (the actor's) and ``critic_hidden``."""
    if isinstance(arch, dict):
        if set(arch) - {"pi", "vf"}:
            raise ValueError(f"policy_kwargs net_arch: keys pi and vf only; got {sorted(arch)}.")
        pi, vf = _widths(arch.get("pi", [])), _widths(arch.get("vf", []))
        return {"hidden": pi, "critic_hidden": vf} if pi != vf else {"hidden": pi}
    return {"hidden": _widths(arch)}


def _widths(arch: Any) -> tuple[int, ...]:
    if not isinstance(arch, (list, tuple)) or not all(isinstance(h, int) for h in arch):
        raise ValueError(f"policy_kwargs net_arch must be a list of widths or dict(pi=..., "
                         f"vf=...); got {arch!r}.")
    return tuple(arch)


def hyperparameters(given: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    """``agents.make``'s keywords with SB3's names mapped to pgrad's; an SB3 name pgrad has no
    field for is a TypeError naming what to do instead."""
    out = {}
    for key, value in given.items():
        if key in fields:
            out[key] = value
        elif key in RENAMED and RENAMED[key] in fields:
            if RENAMED[key] in given:
                raise TypeError(f"{key} is SB3's name for {RENAMED[key]}; give one of them.")
            out[RENAMED[key]] = value
        elif key == "policy_kwargs":
            out.update(_policy_kwargs(dict(value or {}), fields))
        elif key == "verbose" and not value:
            continue  # verbose=0: nothing to show, nothing to do
        elif key in POINTERS:
            raise TypeError(f"{key} is Stable-Baselines3's; pgrad: {POINTERS[key]}.")
        else:
            out[key] = value  # the Config says which field is unknown
    return out


def _policy_kwargs(kw: dict[str, Any], fields: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "net_arch" in kw:
        out.update(net_arch(kw.pop("net_arch")))
    if "activation_fn" in kw:
        out["activation"] = activation_name(kw.pop("activation_fn"))
    for key in list(kw):
        if key in POLICY_KWARGS and POLICY_KWARGS[key] in fields:
            out[POLICY_KWARGS[key]] = kw.pop(key)
    if kw:
        raise TypeError(f"policy_kwargs {sorted(kw)}: pgrad has no such network option; it "
                        "takes net_arch, activation_fn, log_std_init, ortho_init, squash_output, "
                        "share_features_extractor (or its own hyperparameters: hidden, "
                        "activation, encoder, ...).")
    return out


def learn_arguments(total_steps: int | None, callbacks: Any, progress: bool,
                    total_timesteps: int | None, progress_bar: bool | None, callback: Any,
                    unknown: dict[str, Any]) -> tuple[int, Any, bool]:
    """``learn``'s ``(total_steps, callbacks, progress)`` from pgrad's or Stable-Baselines3's
    names of them; an argument given under both names, a missing ``total_steps`` or another
    keyword is a TypeError (an SB3 one names pgrad's way)."""
    for key in unknown:
        if key in POINTERS:
            raise TypeError(f"{key} is Stable-Baselines3's; pgrad: {POINTERS[key]}.")
        raise TypeError(f"learn() got an unexpected keyword argument {key!r}.")
    for ours, theirs, name in ((total_steps, total_timesteps, "total_timesteps"),
                               (callbacks, callback, "callback")):
        if ours is not None and theirs is not None:
            raise TypeError(f"{name} is SB3's name of an argument also given; give one.")
    steps = total_timesteps if total_steps is None else total_steps
    if steps is None:
        raise TypeError("learn() needs total_steps (env steps to add).")
    callbacks = callback if callbacks is None else callbacks
    return steps, callbacks, progress if progress_bar is None else bool(progress_bar)
