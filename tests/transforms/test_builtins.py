"""Transform properties on hand-made per-step gradients (no model needed)."""

import numpy as np
import pytest
import tensorflow as tf
from policies import assert_all_close

import pgrad
from pgrad import chain
from pgrad.transforms import standardized


def per_step(t=6, seed=0):
    """Two variables' per-step gradients, ``[T, 3, 2]`` and ``[T, 2]``."""
    rng = np.random.default_rng(seed)
    return [tf.constant(rng.normal(size=(t, 3, 2)), tf.float32),
            tf.constant(rng.normal(size=(t, 2)), tf.float32)]


def step_norms(grads):
    return np.sqrt(sum(np.sum(np.reshape(np.square(g), (g.shape[0], -1)), 1) for g in grads))


def run(transform, grads, **ctx):
    out, _ = transform.update(grads, transform.init(None), **ctx)
    return out


def test_identity_and_scale():
    g = per_step()
    assert_all_close(run(pgrad.identity(), g), g)
    assert_all_close(run(pgrad.scale(-0.5), g), [-0.5 * x for x in g])


def test_weight_by_multiplies_each_step():
    g, w = per_step(), np.arange(6, dtype=np.float32) - 2
    out = run(pgrad.weight_by("returns"), g, returns=w)
    assert_all_close(out, [x * w.reshape((-1,) + (1,) * (x.ndim - 1)) for x in g])


def test_weight_by_standardize_gives_mean0_std1_weights():
    w = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 3.0], np.float32)
    ones = [tf.ones([6, 1])]
    (out,) = run(pgrad.weight_by("advantages", standardize=True), ones, advantages=w)
    weights = out.numpy().ravel()  # sample std 1, as Stable-Baselines3 (torch's .std())
    assert abs(weights.mean()) < 1e-6 and abs(weights.std(ddof=1) - 1.0) < 1e-5
    (out,) = run(pgrad.weight_by("advantages", standardize=True, ddof=0), ones, advantages=w)
    assert abs(out.numpy().std() - 1.0) < 1e-5


def sb3_normalized(w, ddof=1):
    """Stable-Baselines3's ``(adv - adv.mean()) / (adv.std() + 1e-8)`` in float64 numpy."""
    w = np.asarray(w, np.float64)
    return (w - w.mean()) / (w.std(ddof=ddof) + 1e-8)


@pytest.mark.parametrize("ddof", [1, 0])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_standardized_matches_numpy(ddof, dtype):
    w = np.random.default_rng(3).normal(2.0, 5.0, size=64)
    got = standardized(tf.constant(w, dtype), ddof=ddof).numpy()
    np.testing.assert_allclose(got, sb3_normalized(w, ddof), rtol=1e-5 if dtype == tf.float32
                               else 1e-12, atol=1e-6 if dtype == tf.float32 else 1e-14)


def test_standardized_conventions_differ_by_sqrt_n_over_n_minus_1():
    """Population std (ddof 0) makes the normalised weights sqrt(64/63) = 1.0079 larger."""
    w = tf.constant(np.random.default_rng(4).normal(size=64))
    ratio = standardized(w, ddof=0) / standardized(w)
    np.testing.assert_allclose(ratio.numpy(), np.sqrt(64 / 63), rtol=1e-9)


def test_standardized_edge_cases_and_eps():
    # A constant batch and a single step standardise to 0; eps is added to the std (SB3).
    for w in ([3.0, 3.0, 3.0], [5.0]):
        np.testing.assert_array_equal(standardized(tf.constant(w)).numpy(), np.zeros(len(w)))
    tiny = np.array([0.0, 1e-8])  # sample std 7.1e-9, below eps: where eps goes matters
    np.testing.assert_allclose(standardized(tf.constant(tiny)).numpy(),
                               sb3_normalized(tiny), rtol=1e-12)
    with pytest.raises(ValueError, match="ddof must be 0 .population std. or 1"):
        pgrad.weight_by("advantages", standardize=True, ddof=2)


def test_standardized_in_tf_function_with_unknown_length():
    fn = tf.function(lambda w: standardized(w), input_signature=[tf.TensorSpec([None])])
    w = np.random.default_rng(5).normal(size=7).astype(np.float32)
    np.testing.assert_allclose(fn(w).numpy(), sb3_normalized(w), rtol=1e-5, atol=1e-6)


def test_weight_by_ignores_unused_context_and_names_missing_key():
    g = per_step()
    run(pgrad.weight_by("returns"), g, returns=np.ones(6), values=np.zeros(6), mine="x")
    with pytest.raises(pgrad.TransformError, match=r"no 'returns'.*\['advantages'\]"):
        run(pgrad.weight_by("returns"), g, advantages=np.ones(6))


def test_clip_per_step_bounds_every_step_and_is_idempotent():
    g = [x * 10 for x in per_step()]
    clip = pgrad.clip_per_step(1.5)
    once = run(clip, g)
    assert np.all(step_norms(once) <= 1.5 * (1 + 1e-6))
    assert_all_close(run(clip, once), once, atol=1e-6)
    small = [x * 1e-3 for x in per_step()]  # below the threshold: untouched, exactly
    for a, b in zip(run(clip, small), small):
        np.testing.assert_array_equal(a, b)


def test_clip_per_step_reports_clip_fraction():
    g = per_step()
    norms = step_norms(g)
    limit = float(np.median(norms))
    t = pgrad.chain(pgrad.clip_per_step(limit), pgrad.mean_steps())
    _, state = t.update(g, t.init(None))
    metrics = pgrad.state_metrics(t, state)
    fraction = float(metrics[f"clip_per_step({limit})/clip_fraction"])
    assert fraction == pytest.approx(np.mean(norms > limit))


def test_clip_by_global_norm_before_and_after_aggregation():
    g = [x * 5 for x in per_step()]
    out = run(pgrad.clip_by_global_norm(2.0), g)
    assert float(pgrad.global_norm(out)) == pytest.approx(2.0, rel=1e-5)
    agg = [tf.reduce_mean(x, 0) for x in g]
    out = run(pgrad.clip_by_global_norm(1e-2), agg)
    assert float(pgrad.global_norm(out)) == pytest.approx(1e-2, rel=1e-5)
    assert_all_close(run(pgrad.clip_by_global_norm(1e9), agg), agg)


def test_sum_and_mean_steps():
    g = per_step()
    assert_all_close(run(pgrad.sum_steps(), g), [x.numpy().sum(0) for x in g])
    assert_all_close(run(pgrad.mean_steps(), g), [x.numpy().mean(0) for x in g])


def test_chain_equals_pieces_by_hand():
    g, w = per_step(), np.linspace(-1, 2, 6).astype(np.float32)
    user = pgrad.stateless(lambda grads, **ctx: [2.0 * x for x in grads], name="double")
    pieces = [pgrad.weight_by("returns"), pgrad.clip_per_step(0.7), user, pgrad.mean_steps(),
              pgrad.clip_by_global_norm(0.3)]
    by_hand = g
    for p in pieces:
        by_hand = run(p, by_hand, returns=w)
    assert_all_close(run(chain(*pieces), g, returns=w), by_hand)


def test_nested_chains_flatten():
    a = chain(pgrad.weight_by("returns"), chain(pgrad.scale(2.0), pgrad.identity()))
    full = chain(a, pgrad.sum_steps())
    assert [t.name for t in full.leaves] == [
        "weight_by('returns')", "scale(2.0)", "identity", "sum_steps"]
    assert len(full.init(None)) == 4


def test_stateful_running_weights_track_all_batches():
    t = pgrad.weight_by_running("returns")
    state = t.init(None)
    seen = []
    rng = np.random.default_rng(3)
    for _ in range(4):
        x = rng.normal(5.0, 3.0, size=7).astype(np.float32)
        seen.append(x)
        out, state = t.update([tf.ones([7])], state, returns=x)
    allx = np.concatenate(seen)
    assert float(state.count) == 28
    assert float(state.mean) == pytest.approx(allx.mean(), rel=1e-5)
    assert float(state.var) == pytest.approx(allx.var(), rel=1e-4)
    np.testing.assert_allclose(out[0], (x - allx.mean()) / np.sqrt(allx.var() + 1e-8), rtol=1e-4)


def test_scale_steps_user_weighting():
    g, adv = per_step(), np.array([-3.0, -1.0, 0.0, 0.5, 2.0, 9.0], np.float32)
    signed_log = pgrad.scale_steps(
        lambda advantages, **_: tf.sign(advantages) * tf.math.log1p(tf.abs(advantages)))
    want = np.sign(adv) * np.log1p(np.abs(adv))
    out = run(signed_log, g, advantages=adv)
    assert_all_close(out, [x * want.reshape((-1,) + (1,) * (x.ndim - 1)) for x in g])


def test_wrong_shape_names_transform_and_both_shapes():
    bad = pgrad.stateless(lambda grads, **_: [x[:, :1] for x in grads], name="my_cut")
    t = chain(pgrad.weight_by("returns"), bad, pgrad.mean_steps())
    with pytest.raises(pgrad.TransformError,
                       match=r"'my_cut' \(#2 of 3.*shape \[6, 1, 2\]; expected \[6, 3, 2\]"):
        t.update(per_step(), t.init(None), returns=np.ones(6))


def test_wrong_dtype_and_count_and_raise_are_named():
    g = per_step()
    f64 = pgrad.stateless(lambda grads, **_: [tf.cast(x, tf.float64) for x in grads], name="f64")
    with pytest.raises(pgrad.TransformError, match="'f64'.*float64; expected float32"):
        chain(f64).update(g, chain(f64).init(None))
    short = pgrad.stateless(lambda grads, **_: grads[:1], name="short")
    with pytest.raises(pgrad.TransformError, match="'short'.*1 gradients; expected 2"):
        chain(short).update(g, chain(short).init(None))

    def boom(grads, **_):
        raise RuntimeError("bad day")

    t = chain(pgrad.stateless(boom))
    with pytest.raises(pgrad.TransformError, match="'boom'.*RuntimeError: bad day"):
        t.update(g, t.init(None))


def test_chain_rejects_impossible_orders():
    with pytest.raises(ValueError, match=r"weight_by\('returns'\).*after 'mean_steps'"):
        chain(pgrad.mean_steps(), pgrad.weight_by("returns"))
    with pytest.raises(ValueError, match="after 'sum_steps'"):
        chain(pgrad.sum_steps(), pgrad.mean_steps())
    with pytest.raises(TypeError, match="stateless"):
        chain(lambda g, **c: g)
