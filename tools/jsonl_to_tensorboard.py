#!/usr/bin/env python3
"""Show a `handgrad train` run in TensorBoard (and, if asked, Weights & Biases).

Reads the run's train.jsonl (docs/training.md, "What a run shows and writes") and
writes TensorBoard event files:

  - every number of a step record becomes a scalar `train/<field>` at the record's
    step: train/loss, train/lr, train/grad_norm, train/tokens (consumed so far),
    train/seconds (the step's wall time), train/tokens_per_s (smoothed);
  - every number of an eval record becomes `eval/<field>` with its `val_` prefix
    dropped: eval/loss, eval/ppl (so train/loss and eval/loss sit side by side);
  - a record of another type with numbers gives `<type>/<field>` the same way;
  - a sample record becomes a text summary `samples` (prompt and text) at its step;
  - run.json beside the jsonl (the run's settings), once there is one, becomes a
    text summary `run.json` (and the W&B run's config).

null values (a skipped step's loss, for one) and true/false are left out. A line
that is not a JSON object with a "type" and an integer "step" is skipped with a
one-line warning naming its line number; nothing stops the conversion.

train.jsonl has no timestamps, so the event wall times are rebuilt from the step
records' "seconds": TensorBoard's "Relative" axis then shows time spent in steps
(evaluations, samples and checkpoints left out).

With --follow the file is tailed while the run writes it: a last line without its
newline yet is kept until the newline comes, the events are flushed whenever the
file is idle, and Ctrl-C (or SIGTERM: `kill` it when it runs in the background)
stops cleanly. If the file is replaced or cut shorter (`handgrad train --resume`
cuts it back to the checkpoint's step), it is read again from the start and only
records past the highest step already written, per record type, are added.

Needs the `tensorboard` package (pip install tensorboard); --wandb needs `wandb`.

Examples:
    python3 tools/jsonl_to_tensorboard.py runs/kjv/train.jsonl          # -> runs/kjv/tb/
    python3 tools/jsonl_to_tensorboard.py runs/kjv/train.jsonl --follow &
    tensorboard --logdir runs/kjv/tb
    python3 tools/jsonl_to_tensorboard.py runs/kjv/train.jsonl --wandb handgrad --wandb-run kjv
"""

import argparse
import glob
import json
import os
import signal
import sys
import time

PREFIX = {"step": "train", "eval": "eval"}


def warn(msg):
    print(f"jsonl_to_tensorboard: {msg}", file=sys.stderr, flush=True)


def die(msg):
    warn(f"error: {msg}")
    sys.exit(1)


def parse_record(raw, lineno, last=False):
    """A line's (type, step, record), or None after a warning if it is malformed. last:
    the file's last line, which has no newline (a run still writing it?)."""
    # Samples can hold bytes that are not UTF-8 (a token cut inside a character).
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        what = "an unfinished last line (no newline yet)" if last else "not JSON"
        warn(f"line {lineno}: {what} (column {e.colno}: {e.msg}); skipped")
        return None
    if not isinstance(rec, dict):
        warn(f"line {lineno}: not a JSON object; skipped")
        return None
    kind, step = rec.get("type"), rec.get("step")
    if not isinstance(kind, str):
        warn(f'line {lineno}: no "type" string; skipped')
        return None
    if isinstance(step, float) and step.is_integer():
        step = int(step)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        warn(f'line {lineno}: no integer "step" >= 0; skipped')
        return None
    return kind, step, rec


def scalars_of(kind, rec):
    """The record's numbers as {tag: value}."""
    out = {}
    for key, value in rec.items():
        if key in ("type", "step") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if kind == "eval" and key.startswith("val_"):
            key = key[4:]
        out[f"{PREFIX.get(kind, kind)}/{key}"] = value
    return out


def as_code_block(text):
    """Markdown that TensorBoard's text tab shows verbatim (an indented code block),
    keeping a sample's newlines and spaces."""
    return "\n".join("    " + line for line in text.split("\n"))


class TensorBoardSink:
    """Event files through tensorboard's own EventFileWriter (tensorboard.summary.Writer
    has no text summaries; torch's SummaryWriter needs this package anyway). Scalars
    are float32 tensors, as TensorBoard's own writers make them: its default loader
    (tensorboard-data-server) shows no float64 scalars. So values keep about 7 digits;
    train/tokens is exact up to 2^24 = 16.7M tokens and rounded beyond."""

    @staticmethod
    def check():
        try:
            import tensorboard.summary.writer.event_file_writer  # noqa: F401
        except ImportError as e:
            die(f"the tensorboard package is needed ({e}); install it with: pip install tensorboard")

    def __init__(self, logdir):
        import numpy as np
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.scalar import metadata as scalar_metadata
        from tensorboard.plugins.text.summary_v2 import text_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
        from tensorboard.util import tensor_util

        self.np, self.event_pb2, self.summary_pb2 = np, event_pb2, summary_pb2
        self.text_pb, self.tensor_util = text_pb, tensor_util
        self.scalar_md = scalar_metadata.create_summary_metadata(display_name=None, description=None)
        self.writer = EventFileWriter(logdir, flush_secs=5)

    def _add(self, summary, step, wall_time):
        self.writer.add_event(self.event_pb2.Event(wall_time=wall_time, step=step, summary=summary))

    def scalars(self, values, step, wall_time):
        summary = self.summary_pb2.Summary()
        for tag, value in values.items():
            tensor = self.tensor_util.make_tensor_proto(self.np.float32(value))
            summary.value.add(tag=tag, metadata=self.scalar_md, tensor=tensor)
        self._add(summary, step, wall_time)

    def text(self, tag, text, step, wall_time):
        self._add(self.text_pb(tag, as_code_block(text)), step, wall_time)

    def config(self, text, settings):
        self._add(self.text_pb("run.json", as_code_block(text)), 0, time.time())

    def flush(self):
        self.writer.flush()

    def close(self):
        self.writer.close()


class WandbSink:
    """The same scalars (and samples, as text) in a W&B run."""

    @staticmethod
    def check():
        try:
            import wandb  # noqa: F401
        except ImportError:
            die("--wandb needs the wandb package; install it with: pip install wandb")

    def __init__(self, project, name):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, name=name)

    def config(self, text, settings):
        self.run.config.update(settings, allow_val_change=True)

    def scalars(self, values, step, wall_time):
        self.run.log(values, step=step)

    def text(self, tag, text, step, wall_time):
        if tag == "samples":
            self.run.log({tag: self.wandb.Html("<pre>" + _html_escape(text) + "</pre>")}, step=step)

    def flush(self):
        pass

    def close(self):
        self.run.finish()


def _html_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def lines(path, follow, interval):
    """Yields ("line", number, bytes) for each line of the file (("last", ...) for a
    final line without its newline, when not following), ("idle",) whenever
    --follow has read everything there is, and ("reopen",) when the file was replaced
    or cut and is read again from its start."""
    f, ino, buf, n = None, None, b"", 0
    try:
        while True:
            if f is None:
                try:
                    f = open(path, "rb")
                except FileNotFoundError:
                    if not follow:
                        raise
                    yield ("idle",)
                    time.sleep(interval)
                    continue
                ino, buf, n = os.fstat(f.fileno()).st_ino, b"", 0
            chunk = f.read(1 << 16)
            if chunk:
                buf += chunk
                *complete, buf = buf.split(b"\n")
                for raw in complete:
                    n += 1
                    yield ("line", n, raw)
                continue
            if not follow:
                if buf:  # a last line without its newline: take it as it is
                    yield ("last", n + 1, buf)
                return
            yield ("idle",)
            time.sleep(interval)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # being replaced: look again next time
            if st.st_ino != ino or st.st_size < f.tell():
                f.close()
                f = None
                yield ("reopen",)
    finally:
        if f is not None:
            f.close()


def stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops like Ctrl-C does


def read_run_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return text, json.loads(text)
    except (OSError, ValueError):
        return None, None


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Convert a handgrad train.jsonl into TensorBoard event files "
        "(scalars train/* and eval/* at each record's step, samples as text), "
        "optionally logging the same scalars to Weights & Biases. With --follow, "
        "keep tailing a run that is still writing the file.",
        epilog="Example: %(prog)s runs/kjv/train.jsonl --follow, then tensorboard --logdir runs/kjv/tb",
    )
    ap.add_argument("jsonl", help="the train.jsonl of a run (OUT/train.jsonl)")
    ap.add_argument("--logdir", help="where to write event files (default: tb/ beside the jsonl)")
    ap.add_argument("--follow", "-f", action="store_true",
                    help="keep reading as the file grows, until Ctrl-C (waits for the file if it does not exist yet)")
    ap.add_argument("--interval", type=float, default=1.0, metavar="S",
                    help="with --follow, seconds between looks at the file (default 1)")
    ap.add_argument("--overwrite", action="store_true",
                    help="remove event files already in --logdir first (else they are refused, "
                    "since TensorBoard would show their points twice)")
    ap.add_argument("--wandb", metavar="PROJECT", help="also log the scalars to this W&B project (needs wandb)")
    ap.add_argument("--wandb-run", metavar="NAME", help="the W&B run's name (default: W&B picks one)")
    args = ap.parse_args(argv)

    path = args.jsonl
    if not args.follow and not os.path.isfile(path):
        die(f"{path}: no such file")
    if args.wandb_run and not args.wandb:
        die("--wandb-run needs --wandb PROJECT")
    TensorBoardSink.check()  # before anything is written or removed
    if args.wandb:
        WandbSink.check()
    logdir = args.logdir or os.path.join(os.path.dirname(os.path.abspath(path)), "tb")
    old = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    if old and not args.overwrite:
        die(f"{logdir} already holds {len(old)} event file(s); pass --overwrite to remove them, or another --logdir")
    for p in old:
        os.remove(p)

    run_json = os.path.join(os.path.dirname(os.path.abspath(path)), "run.json")
    sinks = [TensorBoardSink(logdir)]
    if args.wandb:
        sinks.append(WandbSink(args.wandb, args.wandb_run))

    signal.signal(signal.SIGTERM, stop_on_sigterm)

    base = time.time()
    clock = 0.0          # sum of the step records' "seconds": the rebuilt wall time
    highest = {}         # type -> highest step written, for reading a file again
    reread = False
    records = scalars = skipped = 0

    def settings():  # run.json, once it is there (a new run writes it after starting)
        text, obj = read_run_json(run_json)
        if isinstance(obj, dict):
            for s in sinks:
                s.config(text, obj)
        return isinstance(obj, dict)

    have_settings = settings()
    if args.follow:
        warn(f"following {path} into {logdir}; Ctrl-C to stop")
    try:
        for item in lines(path, args.follow, args.interval):
            if item[0] == "idle":
                have_settings = have_settings or settings()
                for s in sinks:
                    s.flush()
                continue
            if item[0] == "reopen":
                warn(f"{path} was replaced or cut (a resume?); reading it again, adding only later steps")
                reread = True
                continue
            what, lineno, raw = item
            parsed = parse_record(raw, lineno, what == "last")
            if parsed is None:
                skipped += bool(raw.strip())
                continue
            kind, step, rec = parsed
            if reread and step <= highest.get(kind, -1):
                continue
            highest[kind] = max(step, highest.get(kind, -1))
            secs = rec.get("seconds")
            if kind == "step" and isinstance(secs, (int, float)) and not isinstance(secs, bool) and secs >= 0:
                clock += secs
            wall = base + clock
            records += 1
            if kind == "sample":
                text = str(rec.get("prompt", "")) + str(rec.get("text", ""))
                for s in sinks:
                    s.text("samples", text, step, wall)
                continue
            values = scalars_of(kind, rec)
            if values:
                scalars += len(values)
                for s in sinks:
                    s.scalars(values, step, wall)
    except KeyboardInterrupt:
        warn("stopped")
    except FileNotFoundError:
        die(f"{path}: no such file")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for s in sinks:
            s.close()
    note = f"; {skipped} malformed line(s) skipped" if skipped else ""
    warn(f"{records} records, {scalars} scalars written to {logdir}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
