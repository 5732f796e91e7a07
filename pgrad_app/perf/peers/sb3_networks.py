"""PyTorch networks for the Stable-Baselines3 side of the image figures: pgrad's encoders, as
SB3 features extractors (imported only in the SB3 process, which has no TensorFlow).

SB3 has ``NatureCNN`` built in (pgrad's ``nature_cnn`` is the same network) but nothing for
MinAtar's small boolean planes; :class:`MinAtarCNN` is pgrad's ``minatar_cnn``
(:func:`pgrad.rl.models.encoders.minatar_cnn`): Conv 16 3x3 stride 1 ReLU, Flatten, Linear 128 ReLU.
"""

from __future__ import annotations

from typing import Any


def minatar_policy_kwargs() -> dict[str, Any]:
    """SB3 ``policy_kwargs`` giving ``MlpPolicy`` pgrad's MinAtar policy: the shared
    ``minatar_cnn`` extractor, then a single linear layer each for the logits and the value
    (``net_arch=[]``, as SB3's ``CnnPolicy`` and pgrad's encoded policies), orthogonal init."""
    import torch as th
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class MinAtarCNN(BaseFeaturesExtractor):
        """``[N, H, W, C]`` bool planes (channel-last, as MinAtar gives them) -> ``[N, 128]``.

        SB3 only scales and transposes uint8 images; a bool Box reaches the extractor as
        float 0/1 in its own channel-last layout, so the transpose is here.
        """

        def __init__(self, observation_space, features_dim: int = 128):
            super().__init__(observation_space, features_dim)
            h, w, c = observation_space.shape
            self.conv = th.nn.Sequential(th.nn.Conv2d(c, 16, 3, 1), th.nn.ReLU(),
                                         th.nn.Flatten())
            self.linear = th.nn.Sequential(
                th.nn.Linear(16 * (h - 2) * (w - 2), features_dim), th.nn.ReLU())

        def forward(self, obs: th.Tensor) -> th.Tensor:
            return self.linear(self.conv(obs.permute(0, 3, 1, 2)))

    return {"features_extractor_class": MinAtarCNN, "net_arch": [],
            "share_features_extractor": True}


POLICY_KWARGS = {"minatar_cnn": minatar_policy_kwargs}
