"""Per-sample gradients and pgrad transforms inside Keras ``fit()``.

``PerSampleModel`` is a ``keras.Model`` whose ``train_step`` treats each sample of a batch the
way pgrad treats each step of a rollout:

1. per-sample losses ``l_b`` (``[B]``) from the compiled loss, which must be built with
   ``reduction=None`` (sample weights multiply each sample's loss, weight regularisers are added
   to every sample's loss);
2. the per-sample objectives are ``-l_b`` -- **ascent direction**, like pgrad's log-probs -- so
   the same chains work unchanged and ``pgrad.apply_updates`` negates once for the optimizer;
3. ``pgrad.policy_gradients`` runs the transform chain over them by the cheapest exact path
   (a chain that only clips or reweights samples never materialises ``[B, params]``), with
   context ``losses`` ``[B]``, ``sample_weight`` ``[B]`` (ones if none), ``x``, ``y``, ``y_pred``;
4. the compiled optimizer applies the result, the compiled metrics and ``loss`` are updated.

With the default chain ``["mean_steps"]`` the update equals plain Keras (``sum_over_batch_size``)
to round-off. Transform state lives in ``tf.Variable`` s (``model.transform_state``): it is in
``tf.train.Checkpoint`` s of the model, in ``.keras`` files and in ``save_weights``.

Save/load: pass the chain as a *spec* (``pgrad.transforms.registry``), e.g.
``[("clip_per_step", {"max_norm": 1.0}), "mean_steps"]``; it goes into the model config and is
rebuilt on load. A model given a raw ``GradientTransform`` trains normally but cannot be
serialised (register the factory and use its name instead).

Per-sample independence: row ``b`` of the loss must depend only on sample ``b``, so layers that
mix samples in training mode (``BatchNormalization``) break per-sample gradients, as they do in
any per-example method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

# Private Keras 3 pieces, used only to build the functional variant without Keras' class
# surgery (see PerSampleModel.__new__). Guarded: a Keras without them still gives subclassed
# PerSampleModels (public API only), and functional construction says so in one line.
try:
    from keras.src.models import model as _keras_model
    from keras.src.models.functional import Functional

    FUNCTIONAL_SUPPORTED = hasattr(_keras_model, "Trainer") and hasattr(Functional, "__init__")
except ImportError:  # pragma: no cover  (a Keras that moved its internals)
    _keras_model = Functional = None
    FUNCTIONAL_SUPPORTED = False

from pgrad.core.apply import apply_updates
from pgrad.engine import PATHS, policy_gradients
from pgrad.transforms import GradientTransform, TransformState
from pgrad.transforms.registry import normalize_spec, transform_from_spec

DEFAULT_SPEC: tuple[tuple[str, dict[str, Any]], ...] = (("mean_steps", {}),)
_STATE_KEY = "pgrad_transform_state_"


def _column_to_vector(sample_weight):
    """``[B, 1]`` sample weights -> ``[B]`` (Keras accepts both; per-sample losses need ``[B]``)."""
    if sample_weight is None or tf.nest.is_nested(sample_weight):
        return sample_weight
    sample_weight = tf.convert_to_tensor(sample_weight)
    if sample_weight.shape.rank == 2 and sample_weight.shape[1] == 1:
        return sample_weight[:, 0]
    return sample_weight


def _functional_arguments(args, kwargs) -> bool:
    """Whether ``keras.Model(*args, **kwargs)`` would build a functional model (inputs and
    outputs given), as Keras decides it (``functional_init_arguments``)."""
    return len(args) == 2 or (len(args) == 1 and "outputs" in kwargs) or (
        "inputs" in kwargs and "outputs" in kwargs)


@keras.saving.register_keras_serializable(package="pgrad")
class PerSampleModel(keras.Model):
    """A Keras model trained by per-sample gradients through a pgrad transform chain.

    Build it like ``keras.Model``: functionally, ``PerSampleModel(inputs, outputs,
    transform=...)``, or by subclassing (forward ``**kwargs`` to ``super().__init__``).

    Args:
      *args: as ``keras.Model``.
      **kwargs: as ``keras.Model``.
      transform: a spec (list of registered names / ``(name, kwargs)`` pairs; serialisable) or a
        ``GradientTransform`` (not serialisable). Default ``["mean_steps"]``: plain Keras.
        Must aggregate the sample axis (``mean_steps``/``sum_steps``/``natural_gradient``...).
      path: engine path, ``"auto"`` (cheapest exact) or force ``"fused"`` / ``"full"``.
      chunk_size: samples per block when per-sample gradients or norms are materialised.
      use_taps: take per-sample gradients and norms of tapped layers (``Dense``, ``Conv1D``/
        ``Conv2D``, ``Embedding``, ``LayerNormalization``) from one batched pass
        (``pgrad.core.taps``); ``False`` for a model that feeds such a layer ``B`` rows that are
        not the samples.

    Attributes:
      transform: the ``GradientTransform`` in use.
      transform_spec: its JSON spec, or ``None`` for a raw transform.
      transform_state: ``TransformState`` (``None`` until the model's variables exist).
    """

    def __new__(cls, *args, **kwargs):
        # keras.Model(inputs, outputs) on a subclass rewrites the subclass' *and its bases'*
        # __bases__ to insert Functional (keras.src.models.model.inject_functional_model_class),
        # which would turn PerSampleModel itself functional and break subclassed construction
        # afterwards. Functional construction instead builds PerSampleFunctional, a subclass
        # that has Functional in its bases from the start.
        if _functional_arguments(args, kwargs) and not (
            Functional is not None and issubclass(cls, Functional)
        ):
            if not FUNCTIONAL_SUPPORTED:
                raise TypeError(
                    "PerSampleModel(inputs, outputs) needs Keras internals that Keras "
                    f"{keras.__version__} does not have (keras.src.models.functional); subclass "
                    "PerSampleModel instead (layers in __init__, a call() method), which uses "
                    "public Keras API only.")
            if cls is not PerSampleModel:
                raise TypeError(
                    f"{cls.__name__}: subclasses of PerSampleModel are built by subclassing "
                    "(layers in __init__, a call() method). For a functional model use "
                    "PerSampleModel(inputs, outputs, transform=...) directly."
                )
            cls = PerSampleFunctional
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, *args: Any, transform: GradientTransform | str | Sequence[Any] | None = None,
                 path: str = "auto", chunk_size: int | None = None, use_taps: bool = True,
                 **kwargs: Any):
        if Functional is not None and isinstance(self, Functional):
            # keras.Model.__init__ minus the class surgery.
            _keras_model.Trainer.__init__(self)
            Functional.__init__(self, *args, **kwargs)
        else:
            super().__init__(*args, **kwargs)
        if path not in PATHS:
            raise ValueError(f"path must be one of {PATHS}; got {path!r}.")
        self._pgrad_path = path
        self._pgrad_chunk_size = chunk_size
        self._pgrad_use_taps = bool(use_taps)
        self.set_transform(transform)

    # -- transform and its state ---------------------------------------------------------------

    @property
    def transform(self) -> GradientTransform:
        return self._pgrad_transform

    @property
    def transform_spec(self) -> list | None:
        return self._pgrad_spec

    def set_transform(self, transform: GradientTransform | str | Sequence[Any] | None) -> None:
        """Replaces the chain (spec or ``GradientTransform``); its state starts fresh."""
        if transform is None:
            transform = [list(item) for item in DEFAULT_SPEC]
        if isinstance(transform, GradientTransform):
            spec, chain = None, transform
        else:
            spec = normalize_spec(transform)
            chain = transform_from_spec(spec)
        if not chain.aggregates:
            raise ValueError(
                f"transform {chain.name!r} keeps the sample axis; end it with mean_steps() "
                "(plain Keras) or sum_steps()."
            )
        # object.__setattr__: neither Keras' nor TensorFlow's attribute tracking should walk the
        # transform's closures.
        object.__setattr__(self, "_pgrad_transform", chain)
        object.__setattr__(self, "_pgrad_spec", spec)
        self.transform_state: TransformState | None = None
        if self.built and self.trainable_variables:
            self._ensure_state()

    def _ensure_state(self) -> TransformState:
        if self.transform_state is None:
            # init_scope: created once, outside any tf.function trace (like optimizer slots).
            with tf.init_scope():
                self.transform_state = TransformState(
                    self.transform.init(self.trainable_variables)
                )
        return self.transform_state

    # -- losses --------------------------------------------------------------------------------

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: Any = None, training: bool = True) -> tf.Tensor:
        """Per-sample losses ``[B]``: compiled loss (``reduction=None``) + regularisers.

        Used by ``train_step`` and by Keras' ``test_step`` (``evaluate`` reports their mean).
        """
        del x, training
        if getattr(self, "_compile_loss", None) is None:
            raise ValueError("PerSampleModel: compile() the model with a loss first.")
        sample_weight = _column_to_vector(sample_weight)
        losses = self._compile_loss(y, y_pred, sample_weight)  # [B]
        if losses is None or losses.shape.rank != 1:
            shape = None if losses is None else losses.shape.as_list()
            raise ValueError(
                "PerSampleModel needs one loss per sample: compile with a loss built with "
                "reduction=None (e.g. keras.losses.MeanSquaredError(reduction=None)); the "
                f"compiled loss returned shape {shape}."
            )
        for extra in self.losses:  # weight regularisers: scalars, added to every sample's loss
            losses = losses + tf.cast(tf.reduce_sum(extra), losses.dtype)
        return losses

    # -- training ------------------------------------------------------------------------------

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if y is None:
            raise ValueError("PerSampleModel.train_step needs targets y.")
        if self._compile_loss.metrics:
            raise NotImplementedError(
                "PerSampleModel: per-output loss metrics (several compiled losses) would be "
                "updated inside the per-sample gradient computation; use a single loss."
            )
        y_pred = self(x, training=True)  # first: builds a subclassed model not yet built
        variables = self.trainable_variables
        state = self._ensure_state()
        losses = tf.stop_gradient(self.compute_loss(x, y, y_pred, sample_weight))  # [B]
        if sample_weight is None:
            weights = tf.ones_like(losses)  # [B]
        else:
            weights = tf.cast(_column_to_vector(sample_weight), losses.dtype)  # [B] or [B, ...]

        def objective(x_b, y_b, w_b):
            # Ascent direction: the negated loss, row b from sample b only.
            return -self.compute_loss(x_b, y_b, self(x_b, training=True), w_b)  # [B]

        context = {"losses": losses, "sample_weight": weights, "x": x, "y": y, "y_pred": y_pred}
        grads, new_state, info = policy_gradients(
            self.transform, state.read(), objective, variables, (x, y, weights), context,
            path=self._pgrad_path, chunk_size=self._pgrad_chunk_size,
            use_taps=self._pgrad_use_taps,
        )
        state.write(new_state)
        apply_updates(self.optimizer, grads, variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(losses)
        logs = self.compute_metrics(x, y, y_pred, sample_weight)
        logs["grad_norm"] = info["grad_norm"]
        for key, value in info.items():
            if "/" in key:  # transform-reported values, e.g. clip_per_step(1.0)/clip_fraction
                logs[key] = value
        return logs

    # -- serialisation -------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        if self._pgrad_spec is None:
            raise ValueError(
                f"PerSampleModel: the transform {self.transform.name!r} was given as a "
                "GradientTransform, which cannot be serialised. Register its factory with "
                "pgrad.register_transform(name, factory) and pass transform=[..., name, ...]."
            )
        config = super().get_config()
        config.update(transform=self._pgrad_spec, path=self._pgrad_path,
                      chunk_size=self._pgrad_chunk_size, use_taps=self._pgrad_use_taps)
        return config

    def save_own_variables(self, store: Any) -> None:  # Keras's dict-like weights store
        super().save_own_variables(store)
        if self.built and self.trainable_variables:
            for i, v in enumerate(self._ensure_state().values):
                store[f"{_STATE_KEY}{i}"] = v.numpy()

    def load_own_variables(self, store: Any) -> None:
        keys = list(store.keys())
        own = {k: store[k] for k in keys if not k.startswith(_STATE_KEY)}
        super().load_own_variables(own)
        saved = [k for k in keys if k.startswith(_STATE_KEY)]
        if not saved:
            return
        values = self._ensure_state().values
        if len(saved) != len(values):
            raise ValueError(
                f"PerSampleModel: the file holds {len(saved)} transform-state values but "
                f"{self.transform.name!r} has {len(values)}; was it saved with another chain?"
            )
        for i, v in enumerate(values):
            v.assign(np.asarray(store[f"{_STATE_KEY}{i}"]))


if FUNCTIONAL_SUPPORTED:

    @keras.saving.register_keras_serializable(package="pgrad")
    class PerSampleFunctional(PerSampleModel, Functional):
        """What ``PerSampleModel(inputs, outputs, ...)`` builds: a functional
        ``PerSampleModel``."""
