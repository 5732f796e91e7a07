"""pgrad.core.variables_as_values: stateful code run on values, and vectorized over members.

References: the same code run on real variables (reads, assigns, a tape's gradients, Keras
optimizers' slots and iterations), and a plain Python loop over members for
``tf.vectorized_map``. Tolerances: 0 where the ops are the same; 1e-6 where ``vectorized_map``
batches a matmul (float32 round-off of another summation order).
"""

from __future__ import annotations

import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from pgrad.core import apply as apply_lib
from pgrad.core.variables_as_values import active, select, variables_as_values


def _model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(5, activation="tanh"),
                             keras.layers.Dense(2)])


def _state(model: keras.Model, opt: keras.optimizers.Optimizer) -> list:
    return [*model.trainable_variables, *opt.variables]


def _train_step(model, opt, x, y):
    """One least-squares step with pgrad's apply (ascent grads, NaN skip)."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    return apply_lib.apply_updates(opt, [-g for g in grads], model.trainable_variables,
                                   skip_nonfinite=True), loss


def test_reads_and_assigns_go_to_the_values_and_leave_the_variables_alone():
    v = tf.Variable([1.0, 2.0])
    counter = tf.Variable(3, dtype=tf.int64)

    @tf.function
    def f(x):
        with variables_as_values([(v, x), (counter, tf.constant(10, tf.int64))]) as state:
            first = v * 2.0
            v.assign_add([1.0, 1.0])
            v.assign_sub([0.5, 0.5])
            counter.assign_add(5)
            second = tf.convert_to_tensor(v)
            v.assign(second * 3.0)
            return first, second, state.value(v), state.value(counter)

    first, second, last, count = f(tf.constant([5.0, 6.0]))
    np.testing.assert_array_equal(first, [10.0, 12.0])
    np.testing.assert_array_equal(second, [5.5, 6.5])
    np.testing.assert_array_equal(last, [16.5, 19.5])
    assert int(count) == 15
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])  # untouched
    assert int(counter.numpy()) == 3
    assert active() is None


@pytest.mark.parametrize("make_opt", [
    lambda: keras.optimizers.Adam(1e-2),
    lambda: keras.optimizers.RMSprop(7e-4, rho=0.99, epsilon=1e-5),
    lambda: keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=0.5),
])
def test_a_keras_model_and_optimizer_on_values_equal_them_on_variables(make_opt):
    x = tf.random.stateless_normal([8, 3], [1, 2])
    y = tf.random.stateless_normal([8, 2], [3, 4])
    real, real_opt = _model(0), make_opt()
    real_opt.build(real.trainable_variables)
    on_values, values_opt = _model(0), make_opt()
    values_opt.build(on_values.trainable_variables)
    variables = _state(on_values, values_opt)

    @tf.function
    def step_real():
        return _train_step(real, real_opt, x, y)

    @tf.function
    def step_values(values):
        with variables_as_values(list(zip(variables, values))) as state:
            _, loss = _train_step(on_values, values_opt, x, y)
            return loss, [state.value(v) for v in variables]

    values = [tf.convert_to_tensor(v) for v in variables]
    for _ in range(3):
        step_real()
        loss, values = step_values(values)
    for got, want in zip(values, _state(real, real_opt)):
        np.testing.assert_allclose(got.numpy(), np.asarray(want), rtol=0, atol=1e-7)
    for v, fresh in zip(variables, _state(_model(0), make_opt())):  # the variables never moved
        if len(v.shape) > 0 and v.trainable:
            np.testing.assert_array_equal(np.asarray(v), np.asarray(fresh))


def test_vectorized_members_equal_a_python_loop_and_a_nan_member_changes_nothing():
    """Three members, one with a NaN target: the vectorized step equals each member's own
    step on its own variables; the NaN member's weights, slots and iterations stay put."""
    n = 3
    models = [_model(s) for s in range(n)]
    opts = [keras.optimizers.Adam(1e-2) for _ in range(n)]
    for m, o in zip(models, opts):
        o.build(m.trainable_variables)
    template, template_opt = _model(9), keras.optimizers.Adam(1e-2)
    template_opt.build(template.trainable_variables)
    t_vars = _state(template, template_opt)
    xs = tf.random.stateless_normal([n, 8, 3], [5, 6])
    ys = tf.random.stateless_normal([n, 8, 2], [7, 8]).numpy()
    ys[1, 0, 0] = np.nan
    ys = tf.constant(ys)
    states = [_state(m, o) for m, o in zip(models, opts)]
    stacked = [tf.stack([tf.convert_to_tensor(s[j]) for s in states]) for j in range(len(t_vars))]

    @tf.function
    def vectorized(stacked, xs, ys):
        def one(args):
            values, x, y = args
            with variables_as_values(list(zip(t_vars, values))) as state:
                applied, _ = _train_step(template, template_opt, x, y)
                return applied, [state.value(v) for v in t_vars]
        return tf.vectorized_map(one, (stacked, xs, ys), fallback_to_while_loop=False)

    before = [[np.asarray(v).copy() for v in _state(m, o)] for m, o in zip(models, opts)]
    applied, new = vectorized(stacked, xs, ys)
    assert applied.numpy().tolist() == [True, False, True]
    for k, (m, o) in enumerate(zip(models, opts)):
        ok, _ = tf.function(_train_step)(m, o, xs[k], ys[k])
        assert bool(ok) == (k != 1)
        for j, v in enumerate(_state(m, o)):
            np.testing.assert_allclose(new[j][k].numpy(), np.asarray(v), rtol=0, atol=1e-6)
            if k == 1:
                np.testing.assert_array_equal(new[j][k].numpy(), before[k][j])


def test_tensorflows_own_methods_are_back_once_the_last_block_closes():
    from tensorflow.python.ops import resource_variable_ops as rvo

    names = ("_read_variable_op", "assign", "assign_add", "assign_sub", "sparse_read")
    before = {(c, n): c.__dict__.get(n) for c in (rvo.BaseResourceVariable,
                                                    rvo.ResourceVariable) for n in names}
    v = tf.Variable(1.0)
    with variables_as_values([(v, tf.constant(2.0))]):
        assert rvo.ResourceVariable.__dict__["assign"] is not before[(rvo.ResourceVariable,
                                                                      "assign")]
        with variables_as_values([(v, tf.constant(3.0))]):
            assert float(v.read_value()) == 3.0
        assert float(v.read_value()) == 2.0  # the outer block's value, methods still wrapped
    after = {(c, n): c.__dict__.get(n) for c, n in before}
    assert after == before
    assert float(v.read_value()) == 1.0


def test_other_threads_still_read_the_variables():
    v = tf.Variable(1.0)
    seen = []
    inside = threading.Event()
    done = threading.Event()

    def other():
        inside.wait()
        seen.append(float(v.numpy()))
        seen.append(float(tf.convert_to_tensor(v)))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with variables_as_values([(v, tf.constant(7.0))]):
        v.assign(8.0)
        inside.set()
        done.wait(10)
    t.join()
    assert seen == [1.0, 1.0] and float(v.numpy()) == 1.0


def test_what_it_cannot_run_is_an_error_not_a_read_of_the_variable():
    table = tf.Variable(tf.ones([4, 2]))
    v = tf.Variable(1.0)

    with pytest.raises(NotImplementedError, match="sparse read"):
        with variables_as_values([(table, tf.zeros([4, 2]))]):
            table.sparse_read([0, 1])

    @tf.function
    def assign_in_a_cond(flag):
        with variables_as_values([(v, tf.constant(2.0))]) as state:
            tf.cond(flag, lambda: v.assign(5.0), lambda: tf.constant(2.0))
            return state.value(v) + 1.0

    with pytest.raises(ValueError, match="out of scope"):  # the branch's value, outside it
        assign_in_a_cond(tf.constant(True))
    with pytest.raises(ValueError, match="shape"):
        with variables_as_values([(v, tf.constant(1.0))]):
            v.assign([1.0, 2.0])
    with pytest.raises(RuntimeError, match="no variables_as_values"):
        select(tf.constant(True), lambda: None)
