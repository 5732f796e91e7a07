"""The figures that measure pgrad beside another project, and the side scripts they start.

Each figure runs both sides in fresh processes, one after the other (:func:`pgrad_app.perf.
common.alternate_rounds`), and reports pgrad's rate over the other project's. This package's
``__init__`` imports nothing, so that ``python -m pgrad_app.perf.peers.side_by_side sb3`` and
the side scripts load no TensorFlow of pgrad's.

- :mod:`~pgrad_app.perf.peers.sb3`: training runs beside Stable-Baselines3 (A2C, PPO; MuJoCo,
  MinAtar, Atari); :mod:`~pgrad_app.perf.peers.side_by_side` is one such run per process (pgrad,
  SB3 or the ``pgrad-train`` command) and :mod:`~pgrad_app.perf.peers.sb3_networks` gives SB3
  pgrad's encoders;
- :mod:`~pgrad_app.perf.peers.recurrent`: recurrent PPO beside sb3-contrib's ``RecurrentPPO``
  (its side: ``sb3c_recurrent_side.py``);
- :mod:`~pgrad_app.perf.peers.grpo_trl`: GRPO beside TRL's ``GRPOTrainer`` (its side:
  ``trl_grpo_side.py``), and acting with the KV cache;
- :mod:`~pgrad_app.perf.peers.mappo_benchmarl`: MAPPO and IPPO beside BenchMARL (its side:
  ``benchmarl_side.py``), the speed figure and the learning table.

The ``*_side.py`` scripts run as files under other interpreters (torch, no TensorFlow): they
import nothing of pgrad.
"""
