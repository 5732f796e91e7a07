"""Stable-Baselines3's keyword names on pgrad's API: mapped where pgrad has the same thing, else
refused in one line naming pgrad's way (see docs/migration.md)."""

from __future__ import annotations

from typing import Any

#: SB3 constructor keyword -> pgrad hyperparameter of the same meaning.
RENAMED = {"n_envs": "num_envs", "batch_size": "minibatch_size", "n_epochs": "epochs"}
#: SB3 keywords pgrad has no field for -> what to do instead.
POINTERS = {
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
#: SB3's policy names -> pgrad's ``encoder`` (its MlpPolicy flattens, CnnPolicy is the Nature
#: CNN, MultiInputPolicy picks per part of a Dict observation: pgrad's ``"auto"``).
POLICIES = {"MlpPolicy": "mlp", "CnnPolicy": "nature_cnn", "MultiInputPolicy": "auto"}
#: ``verbose``: 0 nothing, 1 progress (pgrad's bar, or a line per 10% off a terminal), 2 that and
#: one line of metrics per update (SB3's 0 / 1 info / 2 debug).
VERBOSE = (0, 1, 2)


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


def hyperparameters_of(given: dict[str, Any], fields: set[str]) -> dict[str, Any]:
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


#: The name ``agents.make`` used before ``config_and_env`` shared it.
hyperparameters = hyperparameters_of


def learn_arguments(total_steps: int | None, callbacks: Any, progress: bool | None,
                    total_timesteps: int | None, progress_bar: bool | None, callback: Any,
                    unknown: dict[str, Any]) -> tuple[int, Any, bool | None]:
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


def verbosity(value: Any) -> int | None:
    """``verbose`` checked: None (not given) or 0, 1, 2; else a ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in VERBOSE:
        raise ValueError(f"verbose must be 0 (nothing), 1 (progress) or 2 (progress and a line "
                         f"per update); got {value!r}.")
    return int(value)


def encoder_of(policy: Any) -> str:
    """SB3's policy name -> pgrad's ``encoder``; anything else is one line naming pgrad's way."""
    if isinstance(policy, str) and policy in POLICIES:
        return POLICIES[policy]
    shown = (policy if isinstance(policy, str)
             else getattr(policy, "__name__", type(policy).__name__))
    raise TypeError(f"policy {shown!r}: pgrad takes {', '.join(map(repr, POLICIES))} (or a "
                    "Config: Cls(Cls.Config(...), env_id=...); pgrad builds the network from "
                    "the observation space, encoder='auto'|'mlp'|'nature_cnn'|... picks it).")


def config_and_env(cls: Any, hyperparameters: dict[str, Any], env: Any, env_kwargs: Any = None,
                   env_wrapper: Any = None) -> tuple[Any, Any]:
    """``(cls.Config(...), env source)`` from keywords under pgrad's or SB3's names: what
    ``agents.make`` and the SB3-style constructor ``agents.PPO("MlpPolicy", env, ...)`` share.
    ``num_envs`` defaults to an env instance's (1, or a VectorEnv's)."""
    import dataclasses

    import gymnasium as gym

    from pgrad.rl.envs.recipe import env_source

    out = hyperparameters_of(hyperparameters, {f.name for f in dataclasses.fields(cls.Config)})
    if "num_envs" not in out:
        if isinstance(env, gym.vector.VectorEnv):
            out["num_envs"] = env.num_envs
        elif isinstance(env, gym.Env):
            out["num_envs"] = 1
    return cls.Config(**out), env_source(env, env_kwargs, env_wrapper)


def constructor(cls: Any, cfg: Any, env: Any, given: dict[str, Any]) -> tuple[Any, Any, dict]:
    """The agent constructor's arguments in Stable-Baselines3's form: ``Cls(policy, env,
    **hyperparameters)`` (``policy`` and ``env`` also as keywords) -> ``(cfg, env, rest)``;
    ``rest`` holds ``seed`` and ``tensorboard_log`` when given.

    Raises:
      TypeError: a Config given with keyword hyperparameters (dataclasses.replace does that),
        an unknown policy, an SB3 keyword pgrad has no field for (naming pgrad's way).
    """
    given = dict(given)
    policy = given.pop("policy", None)
    env = given.pop("env", env)
    rest = {k: given.pop(k) for k in ("seed", "tensorboard_log") if k in given}
    if isinstance(cfg, cls.Config):
        if given or policy is not None:
            raise TypeError(f"{cls.__name__}(cfg, ...) takes its hyperparameters in cfg: "
                            f"dataclasses.replace(cfg, {', '.join(sorted(given))}=...), or "
                            f"{cls.__name__}('MlpPolicy', env, **hyperparameters).")
        return cfg, env, rest
    if cfg is not None and policy is not None:
        raise TypeError(f"{cls.__name__}: policy given twice ({cfg!r} and policy={policy!r}).")
    policy = cfg if cfg is not None else policy
    if policy is not None:
        encoder = encoder_of(policy)
        given.setdefault("encoder", encoder)
    cfg, env = config_and_env(cls, given, env)
    return cfg, env, rest


def verbose_learning(verbose: int | None, progress: bool | None, callbacks: Any
                     ) -> tuple[bool, Any]:
    """``learn``'s ``(progress, callbacks)`` under the agent's ``verbose``: an explicit
    ``progress`` wins; else shown unless ``verbose`` is 0. ``verbose=2`` adds one line of
    metrics per update (:func:`update_line`)."""
    if progress is None:
        progress = verbose != 0
    if verbose == 2:
        callbacks = [c for c in (callbacks, update_line) if c is not None]
    return bool(progress), callbacks


def update_line(loop: Any) -> None:
    """``verbose=2``: one line per update on stderr, ``update 3 step 1,536 policy_loss
    -0.012 ...`` (scalar metrics, 4 significant digits)."""
    shown = " ".join(f"{k} {v:.4g}" for k, v in loop.metrics.items()
                     if isinstance(v, (int, float)))
    loop.say(f"update {loop.updates} step {loop.env_steps:,} {shown}")
