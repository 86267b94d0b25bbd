#!/usr/bin/python3
"""bench/soak.py's expectations about jobs that were running at a restart: one that finished
while the server drained (before it exited) is not expected to resume; one that ended after the
new server started, or has not ended, is. No server: the soak's Jobs calls are faked."""

import os
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import soak  # noqa: E402


class FakeJobs:
    """GetJob answers from a dict of id -> Job."""

    def __init__(self, answers):
        self.lock = threading.Lock()
        self.answers = answers

    def call(self, name, request, timeout=None):
        assert name == "GetJob", name
        return self.answers.get(request.id)


def job(job_id, state, ended=None):
    answer = soak.jobs_pb.Job(id=job_id, state=soak.jobs_pb.JobState.Value(f"JOB_STATE_{state}"))
    if ended is not None:
        answer.end_time.seconds = int(ended)
        answer.end_time.nanos = int((ended - int(ended)) * 1e9)
    return answer


def running(job_id):
    info = soak.JobInfo(job_id, "TRAINING", "tune", 0, 0.0, "tune training")
    info.resumed_expected = True
    info.faults.append("restart")
    return info


class FinishedBeforeExitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stubs = tempfile.TemporaryDirectory()
        soak.generate_stubs(cls.stubs.name)
        soak.STATE_NAME = lambda value: soak.jobs_pb.JobState.Name(value).replace("JOB_STATE_", "")

    @classmethod
    def tearDownClass(cls):
        cls.stubs.cleanup()

    def test_only_a_job_that_ended_before_the_old_server_exited_expects_no_resume(self):
        exited = time.time()
        drained, resumed, unfinished, unknown = (running(f"job-{n}") for n in range(1, 5))
        faults = soak.Faults.__new__(soak.Faults)  # only what finished_before_exit reads
        faults.record = soak.Record(time.monotonic())
        faults.jobs = FakeJobs({
            "job-1": job("job-1", "SUCCEEDED", exited - 0.19),  # the soak's job-22
            "job-2": job("job-2", "SUCCEEDED", exited + 3.0),  # resumed, then finished
            "job-3": job("job-3", "QUEUED"),
        })
        faults.finished_before_exit([drained, resumed, unfinished, unknown], exited)
        self.assertFalse(drained.resumed_expected)
        self.assertTrue(resumed.resumed_expected)
        self.assertTrue(unfinished.resumed_expected)
        self.assertTrue(unknown.resumed_expected)  # GetJob failed: the expectation stands
        self.assertEqual(len(faults.record.notes), 1)
        self.assertIn("job-1 was running at the restart's SIGTERM but SUCCEEDED before the "
                      "server exited", faults.record.notes[0])


if __name__ == "__main__":
    unittest.main()
