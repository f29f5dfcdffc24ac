"""Producers and consumers through `hybridmq.client`, in their own thread and event loop.

Every record carries the application's identity in its headers: ``pid`` (the demo producer's name)
and ``seq`` (0, 1, 2, ... per producer). Each acknowledged record is appended to that producer's
send log (``<out>/sendlogs/<pid>.csv``: ``pid,seq``), the input of the audit. Consumers keep what
they receive (partition, offset, pid, seq).

A producer sends in small groups (one batch on the wire) at a fixed rate. When the client raises,
the demo acts like an at-least-once application: it records the error (the failover timeline shows
the first one), waits a moment and resends the unacknowledged sequences; if the client's connection
is gone, or an on-demand producer's partition stopped taking writes, it reopens the producer (a
fixed one by its partition's name, so it comes back to the *same* partition) and says so. Every
retry loop is bounded by `retry_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, TypeVar

from hybridmq.api.frames import ErrorCode
from hybridmq.client import ClientError, Consumer, Message, Producer
from hybridmq_demo.state import DemoState
from hybridmq_demo.timeline import FIXED, ON_DEMAND, FailoverTracker
from hybridmq_demo.waiting import StepFailed

T = TypeVar("T")
REOPEN_CODES = {ErrorCode.PARTITION_NOT_WRITABLE, ErrorCode.UNKNOWN_PARTITION}


@dataclass(frozen=True)
class LoadConfig:
    bootstrap: list[str]
    out_dir: Path
    destination: str = "queue:hybridmq-demo"
    fixed_producers: int = 3
    on_demand_producers: int = 2
    consumers: int = 2
    rate: float = 100.0  # records per second per producer
    group: int = 10  # records per send round
    payload: int = 128
    retry_timeout: float = 60.0


@dataclass(frozen=True)
class ProducerSpec:
    name: str
    type: str
    key: str | None


@dataclass(frozen=True)
class ConsumedRecord:
    partition: str
    offset: int
    pid: str
    seq: int
    redelivered: bool


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:200]


class LoadRunner:
    def __init__(self, config: LoadConfig, state: DemoState, tracker: FailoverTracker) -> None:
        self.config = config
        self.state = state
        self.tracker = tracker
        self.specs = [ProducerSpec(f"fixed-{i}", FIXED, f"key-{i}") for i in range(config.fixed_producers)]
        self.specs += [ProducerSpec(f"od-{i}", ON_DEMAND, None) for i in range(config.on_demand_producers)]
        self.sendlog_dir = config.out_dir / "sendlogs"
        self._lock = threading.Lock()
        self.acked: set[tuple[str, int]] = set()
        self.consumed: list[ConsumedRecord] = []
        self.consumed_keys: set[tuple[str, int]] = set()
        self.failures: list[str] = []
        self.first_error = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._stop_producing: asyncio.Event | None = None
        self._stop_consuming: asyncio.Event | None = None
        self._finished: asyncio.Event | None = None
        self._producer_tasks: list[asyncio.Task[None]] = []
        self._consumer_tasks: list[asyncio.Task[None]] = []

    # --------------------------------------------------------------------------- thread control
    def start(self, timeout: float = 30) -> None:
        """Connect consumers, then producers; StepFailed if they are not all up in `timeout`."""
        self.sendlog_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._thread_main, name="load", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise StepFailed(f"clients not connected after {timeout:.0f}s ({self.first_error or 'no error'})")
        if self._startup_error is not None:
            error = self._startup_error
            raise StepFailed(str(error) if isinstance(error, StepFailed) else f"clients: {describe(error)}")

    def _thread_main(self) -> None:
        asyncio.run(self._main())

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_producing = asyncio.Event()
        self._stop_consuming = asyncio.Event()
        self._finished = asyncio.Event()
        try:
            consumers = [await self._open_consumer(i) for i in range(self.config.consumers)]
            self._consumer_tasks = [
                asyncio.create_task(self._consume(i, c), name=f"consumer-{i}")
                for i, c in enumerate(consumers)
            ]
            producers = [await self._open_first(spec) for spec in self.specs]
            self._producer_tasks = [
                asyncio.create_task(self._produce(spec, p), name=spec.name)
                for spec, p in zip(self.specs, producers, strict=True)
            ]
        except BaseException as exc:
            self._startup_error = exc
            self._ready.set()
            await self._shutdown_consumers(5)
            return
        self._ready.set()
        await self._finished.wait()

    # -------------------------------------------------------------------------------- producers
    async def _open_producer(
        self, spec: ProducerSpec, partition: str | None = None, first: bool = True
    ) -> Producer:
        """Open `spec`'s producer (by key/type, or on the named partition); the first time, register
        it with the tracker."""
        producer = await Producer.connect(
            self.config.bootstrap,
            partition_type=spec.type,
            key=spec.key if partition is None else None,
            partition=partition,
            client_id=f"demo-{spec.name}",
        )
        self.state.update_producer(spec.name, type=spec.type, partition=producer.partition, status="open")
        if first:
            self.tracker.register_producer(spec.name, spec.type, producer.partition)
            self.state.emit(f"producer {spec.name} ({spec.type}) opened on partition {producer.partition}")
        return producer

    async def _open_first(self, spec: ProducerSpec, wait_s: float = 20.0) -> Producer:
        """Open a producer; while the CM has not yet seen the new Partitions (UNKNOWN_PARTITION),
        retry for up to `wait_s` seconds."""
        started = time.monotonic()
        while True:
            try:
                producer = await self._open_producer(spec)
            except ClientError as exc:
                if exc.code != ErrorCode.UNKNOWN_PARTITION:
                    raise
                if time.monotonic() - started > wait_s:
                    active = sorted(
                        p.name
                        for p in self.state.all_partitions()
                        if p.type == spec.type and p.state == "Active"
                    )
                    raise StepFailed(
                        f"the CM still answers {describe(exc)} after {wait_s:.0f}s, while the API server"
                        f" shows Active {spec.type} partitions {active}: the CM does not see the Partitions"
                    ) from None
                self.state.set_progress(f"producer {spec.name}: {describe(exc)}; retrying")
                await asyncio.sleep(0.5)
                continue
            waited = time.monotonic() - started
            if waited > 0.1:
                self.state.emit(f"the CM had no writable {spec.type} partition for {waited:.1f}s")
            return producer

    async def _reopen(self, spec: ProducerSpec, old: Producer, why: str) -> Producer:
        old.abort()
        same = old.partition if spec.type == FIXED else None
        producer = await self._open_producer(spec, partition=same, first=False)
        self.tracker.note(
            f"demo app reopened producer {spec.name} ({why}): now on {producer.partition}"
            + ("" if producer.partition == old.partition else f" (was {old.partition})")
        )
        return producer

    def _value(self, name: str, seq: int) -> bytes:
        head = f"{name}:{seq}:".encode()
        return head + b"x" * max(0, self.config.payload - len(head))

    async def _produce(self, spec: ProducerSpec, producer: Producer) -> None:
        assert self._stop_producing is not None
        cfg = self.config
        log: TextIO = (self.sendlog_dir / f"{spec.name}.csv").open("a", buffering=1)
        log.write("# producer_id,sequence (acknowledged)\n")
        loop = asyncio.get_running_loop()
        interval = cfg.group / cfg.rate
        next_round = loop.time()
        seq = 0
        try:
            while not self._stop_producing.is_set():
                pending = list(range(seq, seq + cfg.group))
                retry_deadline: float | None = None
                while pending:
                    results = await asyncio.gather(
                        *(
                            producer.send(
                                cfg.destination,
                                self._value(spec.name, s),
                                headers={"pid": spec.name, "seq": str(s)},
                            )
                            for s in pending
                        ),
                        return_exceptions=True,
                    )
                    now = time.monotonic()
                    ok = [
                        (s, r)
                        for s, r in zip(pending, results, strict=True)
                        if not isinstance(r, BaseException)
                    ]
                    failed = [
                        (s, r) for s, r in zip(pending, results, strict=True) if isinstance(r, BaseException)
                    ]
                    if ok:
                        partition = str(ok[-1][1].partition)
                        with self._lock:
                            self.acked.update((spec.name, s) for s, _ in ok)
                        log.write("".join(f"{spec.name},{s}\n" for s, _ in ok))
                        self.state.record_acks(spec.name, partition, len(ok), now)
                        self.tracker.on_ack(spec.name, partition, now)
                    if not failed:
                        break
                    error = failed[0][1]
                    assert isinstance(error, BaseException)
                    text = describe(error)
                    self.first_error = self.first_error or f"{spec.name}: {text}"
                    self.tracker.on_producer_error(spec.name, text)
                    row = self.state.update_producer(spec.name, status="retrying")
                    self.state.update_producer(spec.name, errors=row.errors + len(failed))
                    retry_deadline = retry_deadline or now + cfg.retry_timeout
                    if now > retry_deadline:
                        raise StepFailed(
                            f"producer {spec.name} could not get seq {failed[0][0]} acknowledged in"
                            f" {cfg.retry_timeout:.0f}s (last error {text})"
                        )
                    await asyncio.sleep(0.2)
                    reopen = producer.conn.closed or (
                        spec.type == ON_DEMAND
                        and isinstance(error, ClientError)
                        and error.code in REOPEN_CODES
                    )
                    if reopen:
                        why = "connection closed" if producer.conn.closed else text
                        try:
                            producer = await self._reopen(spec, producer, why)
                        except Exception as exc:
                            self.tracker.on_producer_error(spec.name, f"reopen failed: {describe(exc)}")
                            await asyncio.sleep(0.5)
                    pending = [s for s, _ in failed]
                seq += cfg.group
                next_round += interval
                delay = next_round - loop.time()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._stop_producing.wait()
                else:
                    next_round = loop.time()
            self.state.update_producer(spec.name, status="stopped")
        except Exception as exc:
            reason = str(exc) if isinstance(exc, StepFailed) else f"producer {spec.name}: {describe(exc)}"
            self.failures.append(reason)
            self.state.update_producer(spec.name, status="FAILED")
            self.state.emit(f"producer {spec.name} gave up: {reason}")
        finally:
            log.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await producer.close()

    # -------------------------------------------------------------------------------- consumers
    async def _open_consumer(self, index: int) -> Consumer:
        consumer = await Consumer.connect(
            self.config.bootstrap, self.config.destination, client_id=f"demo-consumer-{index}"
        )
        self.state.emit(f"consumer {index} subscribed to {self.config.destination}")
        return consumer

    def _take(self, msg: Message) -> None:
        headers = msg.headers or {}
        pid, seq = headers.get("pid"), headers.get("seq")
        if pid is None or seq is None:
            return
        record = ConsumedRecord(msg.partition, msg.offset, str(pid), int(seq), msg.redelivered)
        with self._lock:
            self.consumed.append(record)
            self.consumed_keys.add((record.pid, record.seq))
        self.state.record_consumed(1)

    async def _consume(self, index: int, consumer: Consumer) -> None:
        assert self._stop_consuming is not None
        deadline: float | None = None
        try:
            while not self._stop_consuming.is_set():
                try:
                    msg = await consumer.receive(timeout=0.5)
                except TimeoutError:
                    continue
                except (ConnectionError, ClientError) as exc:
                    now = time.monotonic()
                    deadline = deadline or now + self.config.retry_timeout
                    if now > deadline:
                        raise StepFailed(f"consumer {index} lost its connection: {describe(exc)}") from None
                    self.tracker.note(f"consumer {index}: {describe(exc)}; the demo app resubscribes")
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(2):
                            await consumer.close()
                    await asyncio.sleep(0.5)
                    with contextlib.suppress(Exception):
                        consumer = await self._open_consumer(index)
                    continue
                deadline = None
                if isinstance(msg, Message):
                    self._take(msg)
        except Exception as exc:
            self.failures.append(str(exc) if isinstance(exc, StepFailed) else describe(exc))
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await consumer.close()

    # ------------------------------------------------------------------------ main-thread API
    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def unconsumed(self) -> int:
        """Acknowledged records not received by any consumer yet."""
        with self._lock:
            return len(self.acked - self.consumed_keys)

    def consumed_records(self) -> list[ConsumedRecord]:
        with self._lock:
            return list(self.consumed)

    def stop_producers(self, timeout: float = 90) -> None:
        async def stop() -> None:
            assert self._stop_producing is not None
            self._stop_producing.set()
            if self._producer_tasks:
                await asyncio.wait(self._producer_tasks, timeout=timeout - 1)

        if self._loop is not None:
            self._call(stop(), timeout)

    async def _shutdown_consumers(self, wait_s: float) -> None:
        assert self._stop_consuming is not None
        self._stop_consuming.set()
        if self._consumer_tasks:
            await asyncio.wait(self._consumer_tasks, timeout=wait_s)

    def stop(self, timeout: float = 20) -> None:
        """Stop everything (producers first) and end the thread."""
        if self._loop is None or self._thread is None:
            return

        async def stop_all() -> None:
            assert self._stop_producing is not None and self._finished is not None
            self._stop_producing.set()
            if self._producer_tasks:
                await asyncio.wait(self._producer_tasks, timeout=timeout / 2)
            await self._shutdown_consumers(timeout / 2)
            for task in [*self._producer_tasks, *self._consumer_tasks]:
                task.cancel()
            self._finished.set()

        with contextlib.suppress(Exception):
            if self._thread.is_alive():
                self._call(stop_all(), timeout + 2)
        self._thread.join(5)
