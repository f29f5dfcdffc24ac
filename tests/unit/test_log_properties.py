"""Property tests: random appends, raw appends, truncations, retention, reopens and crashes keep the
log equal to a simple in-memory model."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hybridmq.broker.log import LogConfig, PartitionLog, encode_batch

CFG = LogConfig(segment_bytes=1024, index_interval_bytes=128, fsync="never")


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="hmq-prop-"))
        self.log = PartitionLog.open(self.dir, CFG)
        self.model: list[tuple[int, int, int, bytes]] = []  # (base, count, epoch, payload)
        self.start = 0
        self.epoch = 0
        self.n = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def end(self) -> int:
        return self.model[-1][0] + self.model[-1][1] if self.model else self.start

    def _payload(self, size: int) -> bytes:
        self.n += 1
        return (f"{self.n}:".encode() * (size // 3 + 1))[:size]

    @rule(count=st.integers(1, 20), size=st.integers(0, 400), bump=st.booleans())
    def append(self, count: int, size: int, bump: bool) -> None:
        if bump:
            self.epoch += 1
        payload = self._payload(size)
        result = self.log.append(payload, count, self.epoch)
        assert result.base_offset == self.end
        self.model.append((self.end, count, self.epoch, payload))

    @rule(count=st.integers(1, 20), size=st.integers(0, 400), n=st.integers(1, 4))
    def append_raw(self, count: int, size: int, n: int) -> None:
        chunks = []
        for _ in range(n):
            payload = self._payload(size)
            chunks.append(encode_batch(payload, base_offset=self.end, record_count=count, epoch=self.epoch))
            self.model.append((self.end, count, self.epoch, payload))
        self.log.append_raw(b"".join(chunks))

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end + 5))
        new_end = self.log.truncate_to(offset)
        self.model = [b for b in self.model if b[0] + b[1] <= offset]
        assert new_end == self.end

    @rule(data=st.data())
    def retention(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.end + 5))
        new_start = self.log.delete_before(offset)
        assert self.start <= new_start <= max(offset, self.start)
        self.model = [b for b in self.model if b[0] >= new_start]
        self.start = new_start

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.dir, CFG)

    @precondition(lambda self: True)
    @rule(garbage=st.binary(max_size=200))
    def crash(self, garbage: bytes) -> None:
        """Abandon the log without closing it (kill -9), maybe with a torn write on the tail."""
        active = self.log.active_segment.path
        for segment in self.log.segments:
            segment.close()
        with active.open("ab") as f:
            f.write(garbage)
        self.log = PartitionLog.open(self.dir, CFG)

    @invariant()
    def matches_model(self) -> None:
        log = self.log
        assert log.log_start_offset == self.start
        assert log.log_end_offset == self.end
        got = [(h.base_offset, h.record_count, h.epoch, bytes(p)) for h, p in log.iter_batches(max_bytes=700)]
        assert got == self.model
        # Every record is found in its own batch (the tail the log remembers, or the sparse index
        # after a reopen), and a read stopping at a batch's start ends before it.
        for i, (base, count, _epoch, _) in enumerate(self.model):
            for offset in {base, base + count - 1}:
                assert log.read(offset, 1)[:8] == base.to_bytes(8, "big"), (offset, base)
            if i + 1 < len(self.model):
                following = self.model[i + 1][0]
                whole = log.read(base, 1 << 20, max_offset=following)
                assert whole[:8] == base.to_bytes(8, "big")
                assert len(whole) == len(log.read(base, 1)), "read past max_offset"
        # The epoch cache agrees with the batches.
        for base, _count, epoch, _ in self.model:
            assert log.epoch_for_offset(base) == epoch
        if self.model:
            last_epoch = self.model[-1][2]
            assert log.end_offset_for_epoch(last_epoch) == (last_epoch, self.end)
        files = sorted(p.name for p in self.dir.glob("*.log"))
        assert files == [s.path.name for s in log.segments]
        assert os.path.getsize(log.active_segment.path) == log.active_segment.size


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(
    max_examples=int(os.environ.get("HMQ_PROP_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
