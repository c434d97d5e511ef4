"""moestat.pass_ids.PassIds, the pass-id counter every Python integration opens passes with:
ids 0, 1, 2, ... in the order passes begin, an aborted pass's id used up, a refused begin's
not; the recorder files each pass under its id."""
import numpy as np
import pytest

import moestat
from moestat.engines.passes import PassIds


def test_passes_are_filed_under_consecutive_ids_aborted_ones_included():
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(1, 4, 1), window_size=-1)
    recorder.start()
    ids = PassIds()
    for ends in (True, False, True, True):
        pass_id = ids.begin(recorder)
        assert ids.open_id == pass_id
        recorder.record_topk(0, np.array([[pass_id % 4]], dtype=np.int32))
        recorder.end_pass() if ends else recorder.abort_pass()
        assert ids.close() == pass_id and ids.open_id is None
    assert ids.close() is None
    np.testing.assert_array_equal(recorder.snapshot().pass_ids, [0, 2, 3])


def test_a_begin_the_recorder_refuses_uses_no_id():
    recorder = moestat.CpuRecorder(moestat.ModelTopology.uniform(1, 4, 1), window_size=-1)
    recorder.start()
    ids = PassIds()
    ids.begin(recorder)
    with pytest.raises(moestat.Error):
        ids.begin(recorder)  # a pass is already open
    assert ids.open_id == 0
    recorder.end_pass()
    ids.close()
    assert ids.begin(recorder) == 1
