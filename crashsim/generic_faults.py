"""Single I/O faults without a crash, for *any* backend whose factory takes ``fs`` and ``root``
(rules CRASH-FS-9..11 in ``spec/rules/crash_fs.toml``; the JSONL sweep's
:func:`scopecheck.crashsim.jsonl_sweep.fault_sweep` runs these with its own checks added as a
:class:`FaultExtra`, CRASH-10..12).

A crash is not the only way a file operation goes wrong: a disk fills up, a directory turns
read-only, an fsync reports EIO (SQLite's ``ioerr`` tests; PostgreSQL's fsyncgate).  For every
mutating call *k* of the workload's trace and every fault its kind can have
(:func:`scopecheck.crashsim.faults.faults_for`: EACCES, ENOSPC, EIO, an ENOSPC append that wrote a
few bytes first), :class:`FaultRun` runs the workload again from an empty root with call *k*
failing once (:class:`scopecheck.crashsim.faults.OneFault` in
:class:`~scopecheck.crashsim.fs_recorder.RecordingFs`) and the reference model
(``scopecheck.models.reference``) beside it, folded over *acknowledged* operations only.  What each
step may do when the fault hits it (decided here, stated in the rules):

* **commit** (CRASH-FS-9, CRASH-FS-10): it either succeeds — the backend coped, and the commit
  must then be read back and durable like any other — or raises a scopecheck error (a stable
  ``code``; a bare ``OSError`` or ``KeyError`` is a traceback, not an answer).  A failed commit
  is not visible, whole or in part, on the handle, after a process crash or power loss right
  then, or after a clean restart.  Afterwards the handle either reads the model's state and
  acknowledges later commits correctly (each read back at once and present after a restart), or
  refuses them with a scopecheck error that is not a usage error (``unusable``), after which
  closing and opening the Session again gives a handle that works.  A later commit the model
  also rejects (it refers to an entry of the failed one) may be rejected with a usage error.
* **create** (CRASH-FS-11): raises a scopecheck error; the Session is then absent or present
  and empty (a crash or power loss right then too), and creating it again succeeds — or says
  ``already_exists`` and opening it gives the empty Session.
* **restart** (the factory call, or ``open``) (CRASH-FS-11): raises a scopecheck error, loses
  nothing (a crash or power loss right then reopens to the acknowledged state), and calling
  the factory / ``open`` again succeeds with the acknowledged state.
* **delete** (CRASH-FS-11): raises a scopecheck error; the Session is then intact (opens with
  its acknowledged state) or gone, a crash or power loss right then gives one of the two, and
  if it is still listed, deleting again succeeds.

Every check compares with the model only; nothing here reads the backend's files.  The
images "a process crash or power loss right then" and their judgement are the one fault
checker's (:mod:`scopecheck.crashsim.fault_check`): the persistence model's images over the
run's converted trace, where an injected fsync failure is a ``syncfail``, so its writes are
gone at power loss even when a retried fsync succeeds -- acknowledging after that is caught
(CRASH-FS-9, CRASH-SYS-11).

The runs are ordered like the crash points (:func:`fault_plan`, CRASH-COV-1): each kind of fault
on each kind of call is a queue in coverage order (calls around acknowledgements and syncs
first), and the queues take turns, so a failed fsync is tried as early as a failed write.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from scopecheck.crashsim.coverage import ordered_passes
from scopecheck.crashsim.failure import REAPPEARED, CrashFailure, profiles_text
from scopecheck.crashsim.fault_check import (
    FaultImage,
    FaultProblem,
    FaultRerun,
    FaultRules,
    error_place,
    fault_images,
    judge_images,
    shown,
    uncoded,
)
from scopecheck.crashsim.faults import OneFault, faults_for
from scopecheck.crashsim.fs_recorder import FSYNCS, Op, RecordingFs, SimulatedCrash
from scopecheck.crashsim.fs_session import EMPTY, ROOT, SESSION, Factory, read_session
from scopecheck.crashsim.fs_source import acknowledged_at, file_ops
from scopecheck.crashsim.jsonl_workloads import Step, Workload
from scopecheck.crashsim.persistence import PROFILES, FileOp, Image
from scopecheck.crashsim.recovery import close, error_text
from scopecheck.crashsim.sandbox import BASE_TIME, Sandbox, StepClock, show_files
from scopecheck.models.errors import ScopecheckError, UsageError
from scopecheck.models.records import Snapshot
from scopecheck.models.reference import ReferenceRepository, ReferenceSession

if TYPE_CHECKING:
    from scopecheck.crashsim.explore import Findings

#: The rule a failure in a step of this kind breaks (before any blame moves it to CRASH-FS-10).
COMMIT_RULE = "CRASH-FS-9"
HANDLE_RULE = "CRASH-FS-10"
LIFECYCLE_RULE = "CRASH-FS-11"
#: Fault runs over whose trace a fault never fired: the backend does other calls when rerun.
UNFIRED_RULE = "CRASH-FS-7"
#: A commit failed with ``outcome_unknown``: what follows it is judged under this rule.
UNKNOWN_RULE = "CRASH-FS-14"
UNKNOWN = "outcome_unknown"


class FaultTrace(Protocol):
    """What the fault runs read of a fault-free trace (the generic sweep's or the JSONL
    sweep's): the recorded calls, as the persistence model's operations, and where each step
    was acknowledged."""

    @property
    def workload(self) -> Workload: ...

    @property
    def ops(self) -> tuple[Op, ...]: ...

    @property
    def file_ops(self) -> tuple[FileOp, ...]: ...

    @property
    def acked_at(self) -> tuple[int | None, ...]: ...


@attrs.frozen
class FaultExtra:
    """A source's own checks in a fault run, beside the format-blind ones: ``failed_commit
    (kind)`` when a commit failed on the fault hitting a ``kind`` call (JSONL: a failed
    sidecar unlink must not fail it, CRASH-10), ``restarted(files)`` on the files under the
    root after the clean restart that ends a run (JSONL: no retired sidecar left, CRASH-10).
    ``rules`` renames the format-blind rules for the source (the JSONL sweep judges our own
    backend under its CRASH rules)."""

    failed_commit: Callable[[str], tuple[str, str] | None] | None = None
    restarted: Callable[[dict[str, bytes]], tuple[str, str] | None] | None = None
    rules: Mapping[str, str] = attrs.field(factory=dict)


class _Found(Exception):
    """Ends a fault run: ``rule`` is broken, as ``problem`` says; ``place`` is where an
    uncoded error came from (CRASH-FS-12)."""

    def __init__(
        self,
        rule: str,
        problem: str,
        profiles: tuple[str, ...] = (),
        place: str | None = None,
        reappeared: bool = False,
        shown_by: FaultProblem | None = None,
    ) -> None:
        super().__init__(problem)
        self.rule = rule
        self.problem = problem
        self.profiles = profiles
        self.place = place
        self.reappeared = reappeared
        #: The judged image that showed it, when a reopen did.
        self.shown_by = shown_by


class FaultRun:
    """One run of ``workload`` through ``factory`` with ``fault`` injected (see the module
    docstring for what is checked); :meth:`run` returns the broken rule or ``None``."""

    def __init__(
        self,
        factory: Factory,
        workload: Workload,
        fault: OneFault,
        extra: FaultExtra = FaultExtra(),
    ) -> None:
        self.factory = factory
        self.extra = extra
        self.workload = workload
        self.fault = fault
        self.box = Sandbox()
        self.initial = self.box.state()
        self.fs = RecordingFs(self.box.fs, fault=fault)
        self.clock = StepClock()
        self.model = ReferenceRepository()
        self.session: Any = None
        self.repo: Any = None
        self.storage: Any = None
        self.index = 0
        #: The op of the step the fault hit, once it has, and the steps that failed on it.
        self.faulted_step: str | None = None
        self.failed_steps: set[int] = set()
        #: A commit failed on the fault; later, one was acknowledged after it (CRASH-FS-10).
        self.commit_failed = False
        self.acked_after_failure = False
        #: A commit failed with ``outcome_unknown`` (CRASH-FS-14): its writes and timestamp,
        #: until the first reader decides whether it was kept; and whether the handle it
        #: failed on is still the open one (it must refuse commits).
        self.undecided: tuple[Step, int] | None = None
        self.unknown_handle = False
        self.unknown_seen = False
        self.imaged = False
        #: Crash and power-loss images reopened (each one a factory call).
        self.images = 0
        self._scratch: Sandbox | None = None

    # -- bookkeeping ---------------------------------------------------------------------------

    def expected(self) -> Snapshot | None:
        return None if self.session is None else self.session.snapshot()

    def _blame(self, rule: str) -> str:
        """A wrong state found after a commit was acknowledged on a handle that had failed one
        is the handle's fault (CRASH-FS-10): right after the failure the state was checked.
        After a commit failed with ``outcome_unknown`` every wrong state is judged under
        CRASH-FS-14: later readers must agree with the first one."""
        if self.unknown_seen:
            return UNKNOWN_RULE
        return HANDLE_RULE if self.acked_after_failure else rule

    def _step_rule(self) -> str:
        op = self.faulted_step or self.workload.steps[self.index].op
        return COMMIT_RULE if op == "commit" else LIFECYCLE_RULE

    def _where(self) -> str:
        return f"step {self.index + 1} ({self.workload.steps[self.index].op})"

    def _attempt(self, rule: str, what: str, call: Callable[[], Any]) -> tuple[Any, Any]:
        """``(result, None)``, or ``(None, error)`` when the injected fault failed the call with
        a scopecheck error; any other exception breaks ``rule``."""
        before = self.fault.hit
        try:
            return call(), None
        except SimulatedCrash:  # pragma: no cover - fault runs never crash
            raise
        except Exception as exc:
            if before is not None or self.fault.hit is None:
                why = "after the injected fault had passed" if before else "with no fault"
                raise _Found(self._blame(rule), f"{what} raised {error_text(exc)} {why}") from exc
            self.faulted_step = self.workload.steps[self.index].op
            self.failed_steps.add(self.index)
            if not isinstance(exc, ScopecheckError):
                raise _Found(rule, self._uncoded(what, exc), place=error_place(exc)) from exc
            return None, exc

    def _uncoded(self, what: str, exc: BaseException) -> str:
        return uncoded(what, f"{self.fault.fault} of a {self.fault.hit} call", exc)

    # -- images ----------------------------------------------------------------------------------

    def check_images(
        self,
        rule: str,
        what: str,
        extra: tuple[Snapshot | None, ...] = (),
        reappears: tuple[Snapshot | None, ...] = (),
    ) -> None:
        """A process crash, or a power loss, right now must reopen to the acknowledged state
        (or one of ``extra``): no failed operation visible, nothing acknowledged lost -- the
        one fault checker's images and judgement (:mod:`~scopecheck.crashsim.fault_check`)."""
        self.imaged = True
        if self._scratch is None:
            self._scratch = Sandbox()
        scratch = self._scratch
        images = fault_images(
            self.box.state(), file_ops(self.fs.ops, ROOT, self.initial), initial=self.initial,
            seed=f"{self.fault.target}:{len(self.fs.ops)}", profiles=PROFILES,
        )  # fmt: skip
        self.images += len(images)

        def reopen(image: Image) -> Snapshot | None:
            scratch.load(image)
            return read_session(self.factory, scratch, self.clock)

        def hint(image: FaultImage) -> str:
            return self._durability_hint() if image.power_loss else ""

        found = judge_images(
            reopen, images, [self.expected(), *extra], FaultRules.one(rule), what, hint=hint,
            reappears=reappears,
        )  # fmt: skip
        if found is not None:
            raise _Found(found.rule, found.problem, found.profiles, reappeared=found.reappeared,
                         shown_by=found)  # fmt: skip

    def _durability_hint(self) -> str:
        hint = ": fsync the data (and the directory) before acknowledging"
        if self.fault.hit in FSYNCS:
            hint += (
                " -- after a failed fsync its data is not durable even if a retried fsync "
                "succeeds: write it again, or refuse (CRASH-SYS-11)"
            )
        return hint

    # -- steps -----------------------------------------------------------------------------------

    def run(self) -> FaultProblem | None:
        try:
            for index, step in enumerate(self.workload.steps):
                self.index = index
                self.clock.at(index)
                self.fs.step = index
                before = self.fault.hit
                self.imaged = False
                getattr(self, f"_{step.op}")(step)
                if before is None and self.fault.hit is not None and not self.imaged:
                    # The step coped with the fault and was acknowledged: it must be durable.
                    self.faulted_step = step.op
                    self.check_images(
                        self._step_rule(), f"{self._where()} was acknowledged despite the fault"
                    )
            self._finish()
        except _Found as found:
            rule = self.extra.rules.get(found.rule, found.rule)
            image = found.shown_by
            return FaultProblem(
                rule,
                found.problem,
                self.box.tree(),
                bool(found.profiles),
                found.profiles,
                found.place,
                found.reappeared,
                image=None if image is None else image.image,
                allowed=() if image is None else image.allowed,
                cache=None if image is None else image.cache,
            )
        if self.fault.hit is None:
            return FaultProblem(
                UNFIRED_RULE,
                f"the fault never fired: rerun, the backend did not make mutating call "
                f"{self.fault.target} as it did in its trace run (its I/O is not deterministic)",
                self.box.tree(),
            )
        return None

    def _start(self) -> Any:
        """Call the factory (a process start); a failure on the fault must leave everything
        acknowledged in place, and a second call must work (CRASH-FS-11)."""

        def call() -> Any:
            return self.factory(self.clock, fs=self.fs, root=ROOT)

        repo, error = self._attempt(LIFECYCLE_RULE, f"the factory call in {self._where()}", call)
        if error is None:
            return repo
        self.check_images(LIFECYCLE_RULE, f"a failed factory call ({error_text(error)})")
        try:
            return call()
        except Exception as exc:
            raise _Found(
                LIFECYCLE_RULE,
                f"calling the factory again after it failed on the fault raised {error_text(exc)}",
            ) from exc

    def _open(self) -> Any:
        def call() -> Any:
            return self.repo.open(SESSION)

        storage, error = self._attempt(LIFECYCLE_RULE, f"open in {self._where()}", call)
        if error is None:
            return storage
        self.check_images(LIFECYCLE_RULE, f"a failed open ({error_text(error)})")
        try:
            return call()
        except Exception as exc:
            raise _Found(
                LIFECYCLE_RULE,
                f"opening again after open failed on the fault raised {error_text(exc)}",
            ) from exc

    def _read_handle(self, rule: str, what: str) -> None:
        try:
            got = self.storage.snapshot()
        except Exception as exc:
            raise _Found(rule, f"reading the handle {what} raised {error_text(exc)}") from exc
        if got != self.expected():
            raise _Found(
                rule,
                f"the handle {what} reads {shown(got)}, not the acknowledged state "
                f"{shown(self.expected())}",
            )

    def _close_storage(self) -> None:
        storage, self.storage = self.storage, None
        if storage is not None:
            self._attempt(self._step_rule(), "closing the Session", storage.close)

    def _create(self, step: Step) -> None:
        if self.repo is None:
            self.repo = self._start()

        def call() -> Any:
            return self.repo.create(SESSION)

        storage, error = self._attempt(LIFECYCLE_RULE, f"create in {self._where()}", call)
        if error is not None:
            self.check_images(LIFECYCLE_RULE, f"a failed create ({error_text(error)})", (EMPTY,))
            storage = self._create_again()
        self.storage = storage
        self.session = self.model.create(SESSION)
        self._read_handle(self._blame(LIFECYCLE_RULE), f"after {self._where()}")

    def _create_again(self) -> Any:
        """After a failed create: creating again works, or says ``already_exists`` and the
        Session it means opens empty."""
        try:
            return self.repo.create(SESSION)
        except ScopecheckError as exc:
            if exc.code != "already_exists":
                raise _Found(
                    LIFECYCLE_RULE,
                    f"creating again after create failed on the fault raised {error_text(exc)}",
                ) from exc
        except Exception as exc:
            raise _Found(
                LIFECYCLE_RULE,
                f"creating again after create failed on the fault raised {error_text(exc)}",
            ) from exc
        try:
            storage = self.repo.open(SESSION)
            got = storage.snapshot()
        except Exception as exc:
            raise _Found(
                LIFECYCLE_RULE,
                "after a failed create, creating again says already_exists but opening it "
                f"raised {error_text(exc)}",
            ) from exc
        if got != EMPTY:
            raise _Found(
                LIFECYCLE_RULE,
                f"after a failed create the Session exists and is not empty: {shown(got)}",
            )
        return storage

    def _reopen(self, step: Step) -> None:
        """A restart: close the handle and the repository, call the factory again, open."""
        self._close_storage()
        repo, self.repo = self.repo, None
        self._attempt(self._step_rule(), "closing the repository", lambda: close(repo))
        self.repo = self._start()
        self.storage = self._open()
        self._decide(f"the Session after the restart in {self._where()}")
        self._read_handle(self._blame(self._step_rule()), f"after the restart in {self._where()}")

    def _delete(self, step: Step) -> None:
        self._close_storage()

        def call() -> Any:
            return self.repo.delete(SESSION)

        _, error = self._attempt(LIFECYCLE_RULE, f"delete in {self._where()}", call)
        if error is not None:
            self.check_images(LIFECYCLE_RULE, f"a failed delete ({error_text(error)})", (None,))
            self._after_failed_delete()
        self.model.close_session(SESSION)
        self.model.delete(SESSION)
        self.session = None
        self.undecided, self.unknown_handle = None, False

    def _after_failed_delete(self) -> None:
        """The Session is intact or gone; if it is still listed, deleting again works."""
        try:
            if SESSION in self.repo.list():
                storage = self.repo.open(SESSION)
                got = storage.snapshot()
                storage.close()
                if got != self.expected():
                    raise _Found(
                        LIFECYCLE_RULE,
                        f"a failed delete left the Session changed: it reads {shown(got)}",
                    )
                self.repo.delete(SESSION)
            listed = SESSION in self.repo.list()
        except ScopecheckError as exc:
            raise _Found(
                LIFECYCLE_RULE,
                f"after delete failed on the fault, opening or deleting the Session again "
                f"raised {error_text(exc)}",
            ) from exc
        if listed:
            raise _Found(LIFECYCLE_RULE, "the Session is still listed after deleting it again")

    def _commit(self, step: Step) -> None:
        before = self.fault.hit
        now = BASE_TIME + 1000 * self.index
        try:
            self.storage.commit(step.writes)
        except SimulatedCrash:  # pragma: no cover - fault runs never crash
            raise
        except Exception as exc:
            if before is None and self.fault.hit is not None:
                self._failed_commit(exc)
            else:
                self._commit_after_failure(step, exc)
            return
        self._acknowledged(step, now, before)

    def _acknowledged(self, step: Step, now: int, before: str | None) -> None:
        if self.unknown_handle:
            raise _Found(
                UNKNOWN_RULE,
                f"{self._where()} was acknowledged on the handle whose earlier commit failed "
                f"with {UNKNOWN}: it must refuse commits until the Session is opened again",
            )
        if before is not None and self.commit_failed:
            self.acked_after_failure = True
        rule = COMMIT_RULE if before is None else self._blame(self._step_rule())
        try:
            self.session.commit(step.writes, now)
        except UsageError as exc:
            raise _Found(
                rule,
                f"{self._where()} was acknowledged, but the model rejects it ({exc.code}): it "
                "refers to something of a transaction that failed",
            ) from exc
        self._read_handle(rule, f"after the acknowledged {self._where()}")

    def _failed_commit(self, exc: Exception) -> None:
        """The fault failed this commit: a coded error, nothing of it visible on the handle
        (or the handle refuses reads), after a crash or power loss, or later (CRASH-FS-9)."""
        self.faulted_step = "commit"
        self.commit_failed = True
        if self.extra.failed_commit is not None and self.fault.hit is not None:
            found = self.extra.failed_commit(self.fault.hit)
            if found is not None:
                raise _Found(found[0], f"{found[1]}: {error_text(exc)}")
        if not isinstance(exc, ScopecheckError):
            raise _Found(
                COMMIT_RULE,
                self._uncoded(f"the commit in {self._where()}", exc),
                place=error_place(exc),
            )
        if exc.code == UNKNOWN:
            self._unknown_commit(exc)
            return
        try:
            got = self.storage.snapshot()
        except ScopecheckError:
            got = self.expected()  # a handle that refuses reads too is allowed
        kept = self._with(self.workload.steps[self.index], BASE_TIME + 1000 * self.index)
        if got != self.expected():
            raise _Found(
                COMMIT_RULE,
                f"after {self._where()} failed ({error_text(exc)}) the handle reads {shown(got)}: "
                f"the failed transaction is (partly) visible, not {shown(self.expected())}",
                reappeared=got == kept,
            )
        self.check_images(
            COMMIT_RULE,
            f"the failed commit of {self._where()} ({error_text(exc)})",
            reappears=(kept,),
        )

    def _with(self, step: Step, now: int) -> Snapshot | None:
        """The acknowledged state with ``step``'s commit kept, whole; the acknowledged state
        itself when the model rejects that commit."""
        assert self.session is not None
        kept = ReferenceSession(SESSION, list(self.session.log))
        with contextlib.suppress(UsageError):
            kept.commit(step.writes, now)
        return kept.snapshot()

    def _kept(self) -> Snapshot | None:
        """The acknowledged state with the undecided commit kept, whole (CRASH-FS-14)."""
        assert self.undecided is not None
        return self._with(*self.undecided)

    def _unknown_commit(self, exc: ScopecheckError) -> None:
        """The commit failed with ``outcome_unknown``: a reopen may find it kept, whole, or
        not at all -- the handle and the images right now are judged so (CRASH-FS-14)."""
        self.undecided = (self.workload.steps[self.index], BASE_TIME + 1000 * self.index)
        self.unknown_handle = self.unknown_seen = True
        kept = self._kept()
        with contextlib.suppress(ScopecheckError):  # a handle that refuses reads is allowed
            got = self.storage.snapshot()
            if got not in (self.expected(), kept):
                raise _Found(
                    UNKNOWN_RULE,
                    f"after {self._where()} failed ({error_text(exc)}) the handle reads "
                    f"{shown(got)}: a part of the failed transaction, neither "
                    f"{shown(self.expected())} nor it with the whole transaction",
                )
        self.check_images(
            UNKNOWN_RULE, f"the failed commit of {self._where()} ({error_text(exc)})", (kept,)
        )

    def _decide(self, what: str) -> None:
        """The first reader after an ``outcome_unknown`` commit decides whether it was kept:
        the model takes it or not, and every later read is judged against that (CRASH-FS-14)."""
        self.unknown_handle = False
        if self.undecided is None or self.storage is None:
            return
        try:
            got = self.storage.snapshot()
        except Exception as exc:
            raise _Found(UNKNOWN_RULE, f"reading {what} raised {error_text(exc)}") from exc
        kept = self._kept()
        step, now = self.undecided
        self.undecided = None
        if got == kept and got != self.expected():
            self.session.commit(step.writes, now)
        elif got != self.expected():
            raise _Found(
                UNKNOWN_RULE,
                f"{what} reads {shown(got)} after a commit failed with {UNKNOWN}: neither the "
                f"acknowledged state {shown(self.expected())} nor it with the whole failed "
                f"commit {shown(kept)}",
            )

    def _commit_after_failure(self, step: Step, exc: Exception) -> None:
        """A commit raised, not on the fault: allowed when the model rejects it too (usage
        error), or as a refusal after the fault; then reopening must give a working handle."""
        rule = self._blame(HANDLE_RULE if self.commit_failed else self._step_rule())
        if isinstance(exc, UsageError):
            self._model_rejects_too(step, exc, rule)
            return
        if not isinstance(exc, ScopecheckError) or self.fault.hit is None:
            raise _Found(rule, f"{self._where()} raised {error_text(exc)}") from exc
        # The handle refuses after the failure: close it, open the Session again, retry.
        try:
            with contextlib.suppress(ScopecheckError):
                self.storage.close()
            self.storage = self.repo.open(SESSION)
        except Exception as err:
            raise _Found(
                rule,
                f"{self._where()} was refused ({error_text(exc)}); opening the Session again "
                f"raised {error_text(err)}",
            ) from err
        self._decide("the Session opened again after a refusal")
        self._read_handle(rule, "opened again after a refusal")
        try:
            self.storage.commit(step.writes)
        except UsageError as err:
            self._model_rejects_too(step, err, rule)
            return
        except Exception as err:
            raise _Found(
                rule,
                f"{self._where()} was refused ({error_text(exc)}); after opening the Session again "
                f"it raised {error_text(err)}",
            ) from err
        self._acknowledged(step, BASE_TIME + 1000 * self.index, self.fault.hit)

    def _model_rejects_too(self, step: Step, exc: UsageError, rule: str) -> None:
        """A usage error is right only when the model rejects the commit as well (it refers
        to an entry of a transaction that failed)."""
        try:
            self.session.commit(step.writes, BASE_TIME + 1000 * self.index)
        except UsageError:
            return
        raise _Found(rule, f"{self._where()} raised {error_text(exc)}, but the model accepts it")

    def _finish(self) -> None:
        """A clean restart gives exactly the acknowledged operations."""
        self._close_storage()
        repo, self.repo = self.repo, None
        self._attempt(self._step_rule(), "closing the repository", lambda: close(repo))
        rule = self._blame(self._step_rule())
        try:
            got = read_session(self.factory, self.box, self.clock)
        except Exception as exc:
            raise _Found(rule, f"a clean restart after the run raised {error_text(exc)}") from exc
        if self.undecided is not None:
            step, now = self.undecided
            if got == self._kept() and got != self.expected():
                self.session.commit(step.writes, now)
                self.undecided = None
        if got != self.expected():
            raise _Found(
                rule,
                f"a clean restart after the run gives {shown(got)}, not the acknowledged "
                f"operations {shown(self.expected())}",
            )
        if self.extra.restarted is not None:
            found = self.extra.restarted(self.box.tree())
            if found is not None:
                raise _Found(*found)


@attrs.define
class FaultReport:
    runs: int = 0
    images: int = 0
    failures: list[CrashFailure] = attrs.field(factory=list)


def fault_plan(tr: FaultTrace) -> list[tuple[int, str]]:
    """``(recorded call, fault)`` for every fault every mutating call of ``tr`` can have, in
    coverage order (CRASH-COV-1): each kind of call and fault is a queue ordered by
    :func:`~scopecheck.crashsim.coverage.ordered_passes` (calls around acknowledgements and
    syncs first; calls no crash point stands before -- a ``create_dir`` of the root -- last in
    their queue), and the queues take turns."""
    queues: dict[str, list[tuple[int, str]]] = {}
    order: list[int] = []
    ops = tr.file_ops
    for pass_points in ordered_passes(ops, tr.acked_at):
        order += [ops[k].call for k in pass_points if k < len(ops)]
    order += range(len(tr.ops))  # calls no crash point stands before (a remove of nothing)
    seen: set[int] = set()
    for call in order:
        if call in seen:
            continue
        seen.add(call)
        kind = tr.ops[call].kind
        for fault in faults_for(kind):
            queues.setdefault(f"{kind}:{fault}", []).append((call, fault))
    return [plan for turn in itertools.zip_longest(*queues.values()) for plan in turn if plan]


def fault_runs(
    factory: Factory,
    tr: FaultTrace,
    *,
    max_failures: int = 1,
    only: tuple[int, str] | None = None,
    deadline: float | None = None,
    findings: Findings | None = None,
    seed: int = 0,
    at_least: int = 0,
    start: int = 0,
    limit: int | None = None,
    extra: FaultExtra = FaultExtra(),
    source: str = "fs",
) -> FaultReport:
    """One :class:`FaultRun` per mutating call of ``tr`` and fault its kind can have, in
    :func:`fault_plan` order from its ``start``-th run, at most ``limit`` of them
    (``only=(op_index, "fault:<kind>")``: just that one), until ``deadline`` -- at least
    ``at_least`` runs however late.  With ``findings``, each failure is offered to them
    (distinct ones kept, CRASH-COV-4) and the runs go on until they are full; else they stop
    after ``max_failures``."""
    report = FaultReport()
    plan = fault_plan(tr)[start:]
    for target, fault in plan if limit is None else plan[:limit]:
        variant = f"fault:{fault}"
        if only is not None and (target, variant) != only:
            continue
        late = deadline is not None and time.perf_counter() > deadline
        if late and report.runs >= at_least:
            return report
        report.runs += 1
        run = FaultRun(factory, tr.workload, OneFault(target, fault), extra)
        problem = run.run()
        report.images += run.images
        if problem is None:
            continue
        failure = fault_failure(tr, target, variant, problem, seed, source)
        report.failures.append(failure)
        if findings is not None:
            findings.add(failure)
            if findings.done:
                return report
        elif len(report.failures) >= max_failures:
            return report
    return report


def fault_failure(
    tr: FaultTrace, target: int, variant: str, problem: FaultProblem, seed: int = 0,
    source: str = "fs",
) -> CrashFailure:  # fmt: skip
    op = tr.ops[target]
    kind = f"fault:{op.kind}:{variant.removeprefix('fault:')}"
    if problem.place is not None:
        kind = f"uncoded:{problem.place}"
    elif problem.reappeared:
        kind += REAPPEARED
    return CrashFailure(
        source=source, rule=problem.rule, problem=problem.problem, run="fault",
        kind=kind, seed=seed,
        workload=tr.workload.to_json(), point=target, variant=variant,
        profiles=problem.profiles,
        shown={
            "op": f"{op.describe()} in step {op.step + 1} ({tr.workload.steps[op.step].op})",
            "files_after": show_files(problem.files),
        },
    )  # fmt: skip


def rerun_fault(
    factory: Factory,
    tr: FaultTrace,
    op_index: int,
    fault: str,
    extra: FaultExtra = FaultExtra(),
) -> FaultRerun:
    """Run one fault reproducer's run again: what it broke, the steps, the disk it left, its
    operations and where each step was acknowledged among them (a step that failed on the
    fault, and the one whose check broke a rule, are not).  The run is in process and
    deterministic, so once is enough."""
    wl = tr.workload
    if op_index >= len(tr.ops) or fault not in faults_for(tr.ops[op_index].kind):
        return FaultRerun(None, (), None, (
            f"{wl.name}: the trace has no call {op_index} that can fail with {fault} any more "
            f"({len(tr.ops)} calls); the recorded fault point is gone"
        ))  # fmt: skip
    op = tr.ops[op_index]
    run = FaultRun(factory, wl, OneFault(op_index, fault), extra)
    problem = run.run()
    from scopecheck.crashsim.sandbox import render_files

    lines = (
        f"{wl.name}: {fault} injected into call {op_index} ({op.describe()}) in step "
        f"{op.step + 1} ({wl.steps[op.step].op}), no crash",
        "steps: "
        + ", ".join(
            f"{i + 1}:{f'commit({len(s.writes)} writes)' if s.op == 'commit' else s.op}"
            for i, s in enumerate(wl.steps)
        ),
        *render_files("files on disk at the end of the run", run.box.tree()),
    )
    ops = tuple(file_ops(run.fs.ops, ROOT, run.initial))
    done = len(wl.steps) if problem is None else run.index
    acked_at = tuple(
        at if step < done and step not in run.failed_steps else None
        for step, at in enumerate(acknowledged_at(ops, len(wl.steps)))
    )
    return FaultRerun(problem, lines, run.box.state(), "" if problem else "every check passes",
                      ops=ops, acked_at=acked_at)  # fmt: skip


def replay_fault(
    factory: Factory,
    tr: FaultTrace,
    op_index: int,
    fault: str,
    extra: FaultExtra = FaultExtra(),
) -> tuple[bool, str]:
    """Re-run one fault reproducer: (still failing, text with the steps and the files)."""
    rerun = rerun_fault(factory, tr, op_index, fault, extra)
    problem = rerun.problem
    if not rerun.story:
        return False, rerun.why
    lines = list(rerun.story)
    if problem is None:
        lines.append("every check passes: the fault is handled")
        return False, "\n".join(lines)
    lines.append(f"FAILED {problem.rule}: {problem.problem}")
    lines.append(f"file-system profiles: fails {profiles_text(problem.profiles)}")
    return True, "\n".join(lines)
