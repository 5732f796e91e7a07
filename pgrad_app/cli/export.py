"""Convert a run's exported policy for deployment: TFLite and ONNX (docs/deploy.md).

    pgrad-export runs/a2c-cartpole --tflite cartpole.tflite
    pgrad-export runs/a2c-cartpole --onnx cartpole.onnx
    pgrad-export runs/a2c-cartpole --onnx cartpole_sample.onnx --signature sample_with_noise

DIR is a run directory, a directory ``agent.save`` wrote, or an export (its ``policy/``).
TFLite holds every signature the built-in operators run (action, sample_with_noise,
distribution_params; ``--signature`` picks some); an ONNX file holds one (default: action;
needs tf2onnx: ``pip install 'pgrad[export]'``). Bad input: one line, exit code 2.

Nothing is lost: each FILE is checked before any work (a file name, in an existing writable
folder), written to a temporary file beside it and renamed over it, and an existing FILE is
replaced only if pgrad wrote it (its record ``.FILE.pgrad-export`` matches) or with --overwrite
(pgrad.rl.export.destination). A write that fails (a full disk, the file-size limit) is one
line naming the file, exit code 1, and the old file is as it was.
"""

from __future__ import annotations

import os

from pgrad_app.cli import OneLineParser
from pgrad_app.errors import RunError, UserError, command


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=command("export"), description="Convert the exported policy of a run "
                      "or saved agent to TFLite and/or ONNX.")
    p.add_argument("run", metavar="DIR", help="a run directory, a directory agent.save wrote, "
                   "or an exported policy/")
    p.add_argument("--tflite", metavar="FILE", default=None, help="write a TFLite model here")
    p.add_argument("--onnx", metavar="FILE", default=None, help="write an ONNX model here")
    p.add_argument("--signature", action="append", default=None, metavar="NAME",
                   help="a signature to convert, repeatable: action, sample_with_noise, "
                   "distribution_params (default: TFLite all of them, ONNX action)")
    p.add_argument("--opset", type=int, default=None, metavar="N",
                   help="with --onnx: the ONNX opset (default: tf2onnx's)")
    p.add_argument("--overwrite", action="store_true", help="replace a FILE pgrad did not write "
                   "(default: refuse; files pgrad wrote, unchanged since, are replaced)")
    p.add_argument("--debug", action="store_true", help="show tracebacks (default: off)")
    return p


def _check_destinations(args) -> None:
    """Every FILE checked before any work (one line naming the flag and the file)."""
    from pgrad.rl.export import destination

    wanted = [(flag, value) for flag, value in (("--tflite", args.tflite), ("--onnx", args.onnx))
              if value is not None]
    if len(wanted) == 2 and os.path.abspath(args.tflite) == os.path.abspath(args.onnx):
        raise UserError(f"--tflite and --onnx name the same file "
                        f"{destination.shown(args.tflite)}; give each its own.")
    for flag, value in wanted:
        try:
            destination.check(value, args.overwrite, flag)
        except ValueError as err:
            raise UserError(str(err)) from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tflite is None and args.onnx is None:
        raise UserError("nothing to write: give --tflite FILE and/or --onnx FILE.")
    if args.onnx is not None and args.signature is not None and len(args.signature) > 1:
        raise UserError(f"an ONNX file holds one signature; got {len(args.signature)} "
                        "(convert them one --onnx FILE --signature NAME at a time).")
    _check_destinations(args)
    from pgrad.rl.export import deploy, destination

    target = None
    try:
        if args.tflite is not None:
            target = args.tflite
            path = deploy.to_tflite(args.run, args.tflite, args.signature,
                                    overwrite=args.overwrite)
            print(f"wrote {destination.shown(path)} ({path.stat().st_size / 1e3:.0f} kB, TFLite)")
        if args.onnx is not None:
            target = args.onnx
            signature = args.signature[0] if args.signature else "action"
            path = deploy.to_onnx(args.run, args.onnx, signature, opset=args.opset,
                                  overwrite=args.overwrite)
            print(f"wrote {destination.shown(path)} ({path.stat().st_size / 1e3:.0f} kB, ONNX, "
                  f"{signature})")
    except ValueError as err:
        raise UserError(str(err)) from None
    except OSError as err:  # reading the export, or writing the file (which is as it was)
        name = err.filename if err.filename is not None else (target or args.run)
        if os.fspath(name) == os.fspath(target or ""):
            raise RunError(f"cannot write {destination.shown(name)}: "
                           f"{destination.reason(err)}; nothing was replaced.") from None
        raise RunError(f"cannot read {destination.shown(name)}: {destination.reason(err)}.") \
            from None
    return 0
