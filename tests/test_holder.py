"""tfevo._holder.Untracked: plain state that tf.Module neither wraps nor checkpoints."""

import tensorflow as tf

from tfevo._holder import Untracked


def test_untracked_contents_stay_out_of_modules_and_checkpoints(tmp_path):
    m = tf.Module()
    m.kept = tf.Variable(1.0)
    m.cache = Untracked(fns={}, flag=False, log=[])
    m.cache.fns["v"] = tf.Variable(2.0)
    m.cache.log.append(3)
    assert type(m.cache.fns) is dict and type(m.cache.log) is list  # not wrapped into trackable containers
    assert [v.name for v in m.variables] == [m.kept.name]
    path = tf.train.Checkpoint(m=m).write(str(tmp_path / "ckpt"))
    names = [n for n, _ in tf.train.list_variables(path) if "OBJECT_GRAPH" not in n]
    assert names == ["m/kept/.ATTRIBUTES/VARIABLE_VALUE"]
    assert m.cache.flag is False and "fns" in repr(m.cache)
