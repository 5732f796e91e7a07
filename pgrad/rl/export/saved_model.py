"""Export a trained actor as a self-contained SavedModel, and load it back as a policy.

The SavedModel holds copies of the actor's weights and the observation normaliser's statistics,
and plain TensorFlow ops only: ``tf.saved_model.load(path)`` needs neither pgrad nor Keras.

Its functions (attributes of the loaded object) take one observation -- unbatched, the env's own
shape and dtype -- or a batch of them (any number of leading axes), and return as many actions:

* ``action(observation)`` (also the serving signature): deterministic env actions;
* ``sample(observation, seed)``: sampled env actions, reproducible: ``seed`` is ``[2]`` int64
  and feeds a stateless random op (the same seed and batch give the same actions);
* ``sample_with_noise(observation, noise)``: sampled env actions from the caller's uniforms
  ``noise`` in ``[0, 1)``, ``[..., noise_size]`` (``noise_size`` is in ``pgrad_policy.json``);
  plain arithmetic only, so it converts to TFLite and ONNX (:mod:`pgrad.rl.export.deploy`);
* ``distribution_params(observation)``: ``{"logits"}`` or the pre-squash Gaussian's
  ``{"mean", "log_std"}`` (:func:`pgrad.rl.export.heads.distribution_params`);
* ``action_masked(observation, action_mask)`` (also a serving signature), for Discrete and
  MultiDiscrete actions: deterministic actions with ``action_mask`` ``[..., n]`` bool the legal
  actions (:mod:`pgrad.rl.collection.masks`; for MultiDiscrete the per-dimension masks
  concatenated): the
  argmax over the legal actions. A Dict observation's ``action_mask`` key is not part of the
  ``observation`` argument (:mod:`pgrad.rl.observations.spaces`): pass it as ``action_mask``;
* ``params(flat_observation)``: the distribution parameters ``[N, param_size]`` from flat raw
  observations (normaliser inside) -- differentiable, so observation attacks and sampled
  evaluation work from an export alone (:class:`ExportedPolicy`).

Observations are raw for Box (``[*shape]`` in its dtype) and Discrete (an int64 scalar), the
flat float32 vector of :mod:`pgrad.rl.observations.spaces` (``[flat_dim]``) for other spaces without
images.
Observations with images are the parts of :class:`pgrad.rl.observations.spaces.ObsLayout`: an image
space as its raw ``[H, W, C]`` frames in their own dtype (uint8, bool); a Dict with images as one
argument per part (each image by its key, then ``vector``: the flat float32 rest).

The SavedModel's signatures (``loaded.signatures[name]``, what TF Serving, TFLite and ONNX
converters read) are the same four functions with batched inputs of a fixed rank: keyword
``observation`` (or one keyword per part) ``[N, *shape]``, ``seed`` ``[2]``, ``noise`` ``[N,
noise_size]``; outputs ``output_0`` (actions ``[N, ...]``) or the parameters by name.

Dense-only policies are exported as plain matmuls of copied weights. Policies with an encoder
(a CNN, the user's own Keras model) are traced once through the Keras layers with every variable
read from a copy the module owns (``keras.StatelessScope``): the SavedModel again holds only
plain variables and TensorFlow ops.

A policy whose actor reads some columns of its row (MAPPO's: an agent's own observation, not
the state its critic reads) is exported as a policy of those columns (:mod:`pgrad.rl.export.
columns`): ``observation_space`` in ``pgrad_policy.json`` is theirs, ``row_space`` and
``row_columns`` say where they sit in the row.

Beside it, ``pgrad_policy.json`` records what the export is of (env id, head, spaces), data only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import tensorflow as tf

from pgrad.rl import distributions as dist_lib
from pgrad.rl.acting.policy import Policy
from pgrad.rl.export.columns import ColumnsExport, read_columns
from pgrad.rl.export.feedforward import DenseExport, EncoderExport
from pgrad.rl.export.module import SEED_SPEC, ExportedModule, compiled, traced
from pgrad.rl.export.recurrent import ExportedRecurrentPolicy
from pgrad.rl.models.networks import ActorCritic
from pgrad.rl.observations import spaces
from pgrad.rl.observations.normalize import ObsNormalizer

__all__ = ["FILES", "META_FILE", "SEED_SPEC", "ExportedPolicy", "compiled", "export_policy",
           "find_export", "head_options", "read_metadata", "traced"]

META_FILE = "pgrad_policy.json"
#: What an export directory holds, by name (a dict: a folder and what is inside it), for the run
#: directory's layout; TensorFlow's SavedModel files plus pgrad's metadata.
FILES: dict = {"saved_model.pb": None, "fingerprint.pb": None, META_FILE: None,
               "variables": {"variables.index": None, "variables.data-*": None}, "assets": {}}


def export_policy(net: ActorCritic, obs_norm: ObsNormalizer | None, obs_space: gym.Space,
                  path: str | Path,
                  metadata: dict[str, Any] | None = None) -> None:
    """Writes a SavedModel whose ``action(observation)`` returns deterministic env actions.

    Load with ``tf.saved_model.load(path).action(obs)``; pgrad is not needed. The observation
    normaliser (if any) is inside. Actions: argmax (Discrete, MultiDiscrete), the Gaussian mean
    squashed if so and clipped to the bounds (Box), ``logit > 0`` (MultiBinary); ``sample``
    and ``sample_with_noise`` draw from the policy (see the module docstring). ``metadata``
    (JSON values, e.g. the env id) goes into ``pgrad_policy.json`` beside it.
    """
    columns = read_columns(net, obs_space)
    if net.recurrent:  # the state as an input and an output (pgrad.rl.export.recurrent)
        module: ExportedModule = ExportedRecurrentPolicy(net, obs_norm, obs_space)
    elif columns is not None:  # an agent's own observation (pgrad.rl.export.columns)
        assert isinstance(obs_space, gym.spaces.Box)  # read_columns found columns of a Box
        module = ColumnsExport(net, obs_norm, obs_space, columns)
        metadata = {**(metadata or {}), "row_space": str(obs_space), "row_columns": columns}
        obs_space = module._context.space
    elif net.encoder is not None:
        module = EncoderExport(net, obs_norm, obs_space)
    else:
        module = DenseExport(net, obs_norm, obs_space)
    tf.saved_model.save(module, str(path), signatures=module.signatures())
    meta = {"format": 1, "observation_space": str(obs_space), "head": head_options(net.head),
            "noise_size": module._context.noise_size, **(metadata or {})}
    if net.core is not None:
        meta.update(recurrent=net.core.kind, state_size=net.core.state_size)
    layout = spaces.obs_layout(obs_space)
    if not layout.flat:  # what the inputs are (see the module docstring)
        meta["observation_parts"] = [
            {"name": p.name, "shape": list(p.shape), "dtype": p.dtype.name, "image": p.image}
            for p in layout.parts]
    (Path(path) / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")


def head_options(head: dist_lib.ActionHead) -> dict[str, Any]:
    """The options :func:`pgrad.rl.distributions.make_head` needs to rebuild ``head``."""
    if isinstance(head, dist_lib.GaussianHead):
        return {"log_std_init": head.log_std_init,
                "state_dependent_std": head.state_dependent_std, "squash": head.squash,
                "sde_latent_dim": head.sde_latent_dim}
    return {}


def find_export(path: str | Path) -> Path | None:
    """The export directory at ``path`` or its ``policy/`` subdirectory, if there is one."""
    path = Path(path)
    for candidate in (path, path / "policy"):
        if (candidate / "saved_model.pb").is_file():
            return candidate
    return None


def read_metadata(path: str | Path) -> dict[str, Any]:
    """``pgrad_policy.json`` of an export (``{}`` if absent or unreadable)."""
    try:
        data = json.loads((Path(path) / META_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class ExportedPolicy(Policy):
    """A :class:`pgrad.rl.acting.policy.Policy` read from an export (no agent, no Keras model).

    Args:
      path: the export directory (or a directory holding ``policy/``).
      observation_space, action_space: the spaces it acts in (e.g. from ``gym.make(env_id)``).
    """

    def __init__(self, path: str | Path, observation_space: gym.Space, action_space: gym.Space):
        found = find_export(path)
        if found is None:
            raise ValueError(f"{path} holds no exported policy (no saved_model.pb).")
        try:
            self._module = tf.saved_model.load(str(found))
        except Exception as err:  # noqa: BLE001  (a damaged file fails in many ways)
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"cannot load the exported policy in {found}: {first}") from None
        if not hasattr(self._module, "params"):  # pgrad's exports have had it since 0.2
            why = "" if (found / META_FILE).exists() else f" and no {META_FILE}"
            raise ValueError(f"the SavedModel in {found} was not made by pgrad (it has no params "
                             f"function{why}); pgrad loads the policies it exports (0.2 and "
                             "later): evaluate the run's checkpoint, or export it again.")
        meta = read_metadata(found)
        try:  # data written by export(), but a file anyone can edit: its types checked
            head_args, state_size = meta.get("head", {}), meta.get("state_size", 0) or 0
            if not isinstance(head_args, dict) or isinstance(state_size, bool):
                raise TypeError("'head' must be an object and 'state_size' a number")
            head = dist_lib.make_head(action_space, **head_args)
            state_size = int(state_size)
            if state_size < 0:
                raise ValueError(f"'state_size' is {state_size}")
            if getattr(head, "log_std", None) is not None:
                head.log_std.assign(self._module.log_std)
        except (TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"{found / META_FILE} does not describe this export: "
                             f"{str(err).splitlines()[0] if str(err) else type(err).__name__}; "
                             "export the policy again.") from None
        super().__init__(observation_space, action_space, head)
        self.path = found
        #: A recurrent export's state width (its functions take and return the state).
        self.state_size = state_size

    def _inputs(self, flat):
        if not self.layout.flat:  # the parts, each in its own dtype
            return self.layout.to_tensors(flat)
        return tf.cast(flat, tf.float32)

    def params(self, flat: Any) -> tf.Tensor:
        self._feed_forward_only()
        return self._module.params(self._inputs(flat))

    def step_params(self, flat: Any, state: np.ndarray, episode_start: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        out = self._module.params(self._inputs(flat), state, episode_start)
        return out["params"].numpy(), out["next_state"].numpy()
