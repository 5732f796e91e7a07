"""Convert a run's exported policy for deployment: TFLite and ONNX (docs/deploy.md).

    pgrad-export runs/a2c-cartpole --tflite cartpole.tflite
    pgrad-export runs/a2c-cartpole --onnx cartpole.onnx
    pgrad-export runs/a2c-cartpole --onnx cartpole_sample.onnx --signature sample_with_noise

DIR is a run directory, a directory ``agent.save`` wrote, or an export (its ``policy/``).
TFLite holds every signature the built-in operators run (action, sample_with_noise,
distribution_params; ``--signature`` picks some); an ONNX file holds one (default: action;
needs tf2onnx: ``pip install 'pgrad[export]'``). Bad input: one line, exit code 2.
"""

from __future__ import annotations

from pgrad_app.cli import OneLineParser
from pgrad_app.errors import UserError, command


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
    p.add_argument("--debug", action="store_true", help="show tracebacks (default: off)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tflite is None and args.onnx is None:
        raise UserError("nothing to write: give --tflite FILE and/or --onnx FILE.")
    if args.onnx is not None and args.signature is not None and len(args.signature) > 1:
        raise UserError(f"an ONNX file holds one signature; got {len(args.signature)} "
                        "(convert them one --onnx FILE --signature NAME at a time).")
    from pgrad.rl.export import deploy
    try:
        if args.tflite is not None:
            path = deploy.to_tflite(args.run, args.tflite, args.signature)
            print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB, TFLite)")
        if args.onnx is not None:
            signature = args.signature[0] if args.signature else "action"
            path = deploy.to_onnx(args.run, args.onnx, signature, opset=args.opset)
            print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB, ONNX, {signature})")
    except ValueError as err:
        raise UserError(str(err)) from None
    return 0
