#!/usr/bin/python3
"""Draws training / RL curves from titan's metrics.jsonl files into one PNG.

  scripts/plot_metrics.py METRICS_JSONL [METRICS_JSONL ...] --out PNG [--keys k1,k2,...]
                          [--title TEXT]

One panel per key (5 x 3 inches at 90 dpi, two panels a row), x = the row's "step", one line per input file (labelled by the
file's folder, e.g. outputs/alphabet_sort_grpo). Rows without the key are skipped,
so sparse keys (val_reward every rl.val_freq steps, val_loss every validation.freq
steps) are drawn as lines through the rows that have them, with markers.

Default keys: those of loss, val_loss, reward_mean, val_reward, logprob_diff_max,
tokens_per_s, gen_tokens_per_s, train_tokens_per_s that occur in at least one file.
A key given with --keys that no file has is an error.

Bad input (a missing file, a line that is not a JSON object, a row without an
integer "step", a non-numeric value of a plotted key, no plottable rows) prints one
line "error: FILE:LINE: ..." to stderr and exits with status 2. The PNG is written
to a temporary name, fsync'ed and renamed, so a failed run leaves no partial file.

Needs matplotlib (Debian python3-matplotlib); run by /usr/bin/python3.
"""
import argparse
import json
import math
import os
import sys
import tempfile

DEFAULT_KEYS = ["loss", "val_loss", "reward_mean", "val_reward", "logprob_diff_max", "tokens_per_s",
                "gen_tokens_per_s", "train_tokens_per_s"]
SPARSE_KEYS = {"val_loss", "val_reward"}


class InputError(Exception):
    pass


def read_metrics(path):
    """Rows of one metrics.jsonl: a list of (line number, dict with an integer "step")."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})")
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{n}: not JSON ({e.msg} at column {e.colno})")
        if not isinstance(row, dict):
            raise InputError(f"{path}:{n}: a metrics row must be a JSON object")
        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise InputError(f"{path}:{n}: row has no integer \"step\"")
        rows.append((n, row))
    if not rows:
        raise InputError(f"{path}: no metrics rows")
    return rows


def series(path, rows, key):
    """(steps, values) of key over the rows that have it; a non-number is an error."""
    xs, ys = [], []
    for n, row in rows:
        if key not in row:
            continue
        v = row[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(f"{path}:{n}: \"{key}\" is {json.dumps(v)}, not a finite number")
        xs.append(row["step"])
        ys.append(float(v))
    return xs, ys


def label_of(path):
    folder = os.path.dirname(os.path.abspath(path))
    rel = os.path.relpath(folder)
    return folder if rel.startswith("..") else rel


def plot(inputs, out, keys, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = [(p, read_metrics(p)) for p in inputs]
    if keys is None:
        keys = [k for k in DEFAULT_KEYS if any(k in row for _, rows in data for _, row in rows)]
        if not keys:
            raise InputError(f"{inputs[0]}: none of the default keys ({', '.join(DEFAULT_KEYS)}) occurs; "
                             "name keys with --keys")
    else:
        for k in keys:
            if not any(k in row for _, rows in data for _, row in rows):
                raise InputError(f"{', '.join(inputs)}: no row has key \"{k}\"")
    cols = 1 if len(keys) == 1 else 2
    nrows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.0 * cols, 3.0 * nrows), squeeze=False)
    for i, key in enumerate(keys):
        ax = axes[i // cols][i % cols]
        for path, rows in data:
            xs, ys = series(path, rows, key)
            if xs:
                ax.plot(xs, ys, marker="o" if key in SPARSE_KEYS or len(xs) <= 12 else None,
                        markersize=3.5, linewidth=1.3, label=label_of(path))
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(True, alpha=0.3)
        if len(data) > 1:
            ax.legend(fontsize=7)
    for j in range(len(keys), nrows * cols):
        axes[j // cols][j % cols].axis("off")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise InputError(f"{out}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".plot_metrics.", suffix=".png", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=90)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description="Plot titan metrics.jsonl curves into a PNG.")
    ap.add_argument("metrics", nargs="+", help="metrics.jsonl files")
    ap.add_argument("--out", required=True, help="PNG file to write")
    ap.add_argument("--keys", help="comma-separated metric keys (default: the usual curves present)")
    ap.add_argument("--title", help="figure title")
    a = ap.parse_args(argv)
    keys = None
    if a.keys is not None:
        keys = [k.strip() for k in a.keys.split(",") if k.strip()]
        if not keys:
            print("error: --keys: no key named", file=sys.stderr)
            return 2
    try:
        plot(a.metrics, a.out, keys, a.title)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
