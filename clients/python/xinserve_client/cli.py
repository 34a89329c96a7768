"""Client subcommands of the ``xinserve`` CLI: generate, chat, embed, models.

``service.cli`` imports this module and calls :func:`add_commands`; ``python -m
xinserve_client.cli`` runs the same subcommands where only the client is installed.

Exit codes: 0 ok; 1 the server returned an error for the call; 2 usage or bad input
(including INVALID_ARGUMENT from the server); 3 the server could not be reached
(UNAVAILABLE). Errors are one line on stderr naming the status code (and field
violations), never a stack trace.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from xinserve.v1 import common_pb2, model_pb2

from . import DEFAULT, XinserveClient, cosine_similarity
from ._base import DEFAULT_TARGET
from .errors import InvalidArgumentError, UnavailableError, XinserveError

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

DEFAULT_GENERATE_MODEL = "smollm2-135m-instruct"
DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"

_EXIT_CODES_HELP = (
    "exit codes: 0 ok, 1 the server returned an error, 2 usage or invalid argument, 3 server unreachable/unavailable"
)


def add_commands(subparsers: Any) -> None:
    """Register ``generate``, ``chat``, ``embed`` and ``models`` on the ``xinserve`` CLI.

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers()``. Each
            subcommand sets ``func(args) -> int`` (the exit code).
    """
    common = argparse.ArgumentParser(add_help=False)
    conn = common.add_argument_group("connection")
    conn.add_argument(
        "--target",
        default=os.environ.get("XINSERVE_TARGET", DEFAULT_TARGET),
        help="server address host:port (env XINSERVE_TARGET; default %(default)s)",
    )
    conn.add_argument("--ca", metavar="PEM", help="CA certificate (PEM file) to verify the server; turns TLS on")
    conn.add_argument("--cert", metavar="PEM", help="client certificate chain (PEM file) for mTLS; needs --key")
    conn.add_argument("--key", metavar="PEM", help="client private key (PEM file) for mTLS")
    conn.add_argument("--tls", action="store_true", help="use TLS with the system CA roots")
    conn.add_argument("--server-name", help="TLS name to check the server certificate against")
    conn.add_argument(
        "--token",
        default=os.environ.get("XINSERVE_TOKEN"),
        help="bearer token (env XINSERVE_TOKEN); plaintext only to loopback addresses",
    )
    conn.add_argument("--timeout", type=_positive_float, metavar="SECONDS", help="deadline of the call")
    conn.add_argument("--request-id", help="request id to send (x-request-id)")

    sampling = argparse.ArgumentParser(add_help=False)
    sp = sampling.add_argument_group("sampling (vLLM names; unset = the model's default)")
    sp.add_argument("--max-tokens", type=int, help="maximum tokens to generate")
    sp.add_argument("--min-tokens", type=int)
    sp.add_argument("--temperature", type=float, help="0 = greedy")
    sp.add_argument("--top-p", type=float)
    sp.add_argument("--top-k", type=int)
    sp.add_argument("--min-p", type=float)
    sp.add_argument("--presence-penalty", type=float)
    sp.add_argument("--frequency-penalty", type=float)
    sp.add_argument("--repetition-penalty", type=float)
    sp.add_argument("--seed", type=int)
    sp.add_argument("--stop", action="append", metavar="TEXT", help="stop string (repeatable)")
    sp.add_argument("--ignore-eos", action="store_true", default=None)
    sp.add_argument("--n", type=int, help="number of completions (more than 1 disables streaming)")
    sp.add_argument("--no-stream", action="store_true", help="wait for the whole reply instead of streaming")
    sp.add_argument("--usage", action="store_true", help="print token counts to stderr at the end")

    gen = subparsers.add_parser(
        "generate",
        parents=[common, sampling],
        help="generate text from a prompt (streams as it arrives)",
        description="Generate a completion for PROMPT and stream it to stdout as it arrives.",
        epilog=_EXIT_CODES_HELP,
    )
    gen.add_argument("prompt", nargs="?", help="prompt text; '-' or absent reads stdin")
    gen.add_argument("-m", "--model", default=DEFAULT_GENERATE_MODEL, help="served model name (%(default)s)")
    gen.set_defaults(func=_run_generate)

    chat = subparsers.add_parser(
        "chat",
        parents=[common, sampling],
        help="chat with a model (the server applies its chat template)",
        description=(
            "Send MESSAGE as a user turn and stream the reply. Without MESSAGE on a terminal, "
            "starts an interactive conversation (empty line or Ctrl-D ends it); otherwise "
            "reads the message from stdin."
        ),
        epilog=_EXIT_CODES_HELP,
    )
    chat.add_argument("message", nargs="?", help="user message; '-' reads stdin")
    chat.add_argument("-m", "--model", default=DEFAULT_GENERATE_MODEL, help="served model name (%(default)s)")
    chat.add_argument("--system", help="system prompt")
    chat.set_defaults(func=_run_chat)

    embed = subparsers.add_parser(
        "embed",
        parents=[common],
        help="embed texts; with two or more, print their cosine similarities",
        description=(
            "Embed each TEXT. With one text, print its vector as a JSON array; with two or more, "
            "print the cosine similarity of every pair (add --vectors for the vectors too)."
        ),
        epilog=_EXIT_CODES_HELP,
    )
    embed.add_argument("texts", nargs="+", metavar="TEXT")
    embed.add_argument("-m", "--model", default=DEFAULT_EMBED_MODEL, help="served model name (%(default)s)")
    embed.add_argument("--no-normalize", action="store_true", help="ask for unnormalised vectors")
    embed.add_argument("--vectors", action="store_true", help="print the vectors also with several texts")
    embed.set_defaults(func=_run_embed)

    models = subparsers.add_parser(
        "models",
        parents=[common],
        help="list the server's models (name, kind, state, verification)",
        description="List the models the server knows, or show one in detail.",
        epilog=_EXIT_CODES_HELP,
    )
    models.add_argument("name", nargs="?", help="show this model in detail")
    models.set_defaults(func=_run_models)


def main(argv: list[str] | None = None) -> int:
    """Run the client subcommands alone (``python -m xinserve_client.cli``)."""
    parser = argparse.ArgumentParser(prog="xinserve", description="xinserve client commands")
    add_commands(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130


# -- helpers ---------------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _timeout(args: argparse.Namespace) -> Any:
    return DEFAULT if args.timeout is None else args.timeout


def _err(args: argparse.Namespace, message: str) -> None:
    print(f"xinserve {args.command}: error: {message}", file=sys.stderr, flush=True)


def _client(args: argparse.Namespace) -> XinserveClient:
    return XinserveClient(
        args.target,
        tls=True if args.tls else None,
        ca_cert=args.ca,
        client_cert=args.cert,
        client_key=args.key,
        token=args.token or None,
        server_name=args.server_name,
    )


def _guarded(args: argparse.Namespace, body: Callable[[XinserveClient], int]) -> int:
    """Run body with a client; map exceptions to exit codes and one-line messages."""
    try:
        client = _client(args)
    except (ValueError, TypeError) as exc:
        _err(args, str(exc))
        return EXIT_USAGE
    try:
        with client:
            return body(client)
    except InvalidArgumentError as exc:
        _err(args, str(exc))
        return EXIT_USAGE
    except UnavailableError as exc:
        # A server that replied (ErrorInfo: loading, draining, ...) is running; the hint is for
        # a connection that failed.
        _err(args, str(exc) if exc.reason else f"{exc} (is the server running at {args.target}?)")
        return EXIT_UNAVAILABLE
    except XinserveError as exc:
        _err(args, str(exc))
        return EXIT_SERVER_ERROR
    except (ValueError, TypeError) as exc:
        _err(args, str(exc))
        return EXIT_USAGE
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    names = (
        "max_tokens", "min_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
        "frequency_penalty", "repetition_penalty", "seed", "stop", "ignore_eos", "n",
    )  # fmt: skip
    return {name: getattr(args, name) for name in names if getattr(args, name) is not None}


def _read_stdin_text(what: str) -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise ValueError(f"no {what} given (pass it as an argument or on stdin)")
    text = sys.stdin.read()
    if not text.strip():
        raise ValueError(f"empty {what} on stdin")
    return text


def _write(out: TextIO, text: str) -> None:
    out.write(text)
    out.flush()


def _print_streamed(stream: Iterator[Any], out: TextIO) -> Any:
    """Write text deltas as they arrive; return the final usage (or None)."""
    usage = None
    wrote_newline = True
    for delta in stream:
        if delta.text:
            _write(out, delta.text)
            wrote_newline = delta.text.endswith("\n")
        if delta.HasField("usage"):
            usage = delta.usage
    if not wrote_newline:
        _write(out, "\n")
    return usage


def _print_outputs(outputs: Any, out: TextIO) -> None:
    many = len(outputs) > 1
    for output in outputs:
        if many:
            _write(out, f"--- completion {output.index} ---\n")
        _write(out, output.text if output.text.endswith("\n") else output.text + "\n")


def _print_usage(args: argparse.Namespace, usage: Any) -> None:
    if args.usage and usage is not None:
        print(
            f"usage: prompt_tokens={usage.prompt_tokens} completion_tokens={usage.completion_tokens} "
            f"cached_tokens={usage.cached_tokens}",
            file=sys.stderr,
            flush=True,
        )


# -- subcommands -----------------------------------------------------------------------


def _run_generate(args: argparse.Namespace) -> int:
    def body(client: XinserveClient) -> int:
        prompt = args.prompt if args.prompt not in (None, "-") else _read_stdin_text("prompt")
        sampling = _sampling(args)
        call = {"request_id": args.request_id, "timeout": _timeout(args), **sampling}
        if args.no_stream or (args.n or 1) > 1:
            reply = client.generate(args.model, prompt, **call)
            _print_outputs(reply.outputs, sys.stdout)
            _print_usage(args, reply.usage)
            return EXIT_OK
        with client.generate_stream(args.model, prompt, **call) as stream:
            usage = _print_streamed(stream, sys.stdout)
        _print_usage(args, usage)
        return EXIT_OK

    return _guarded(args, body)


def _run_chat(args: argparse.Namespace) -> int:
    def body(client: XinserveClient) -> int:
        history: list[common_pb2.ChatMessage] = []
        if args.system:
            history.append(common_pb2.ChatMessage(role="system", content=args.system))
        sampling = _sampling(args)

        def turn(text: str) -> None:
            history.append(common_pb2.ChatMessage(role="user", content=text))
            call = {"request_id": args.request_id, "timeout": _timeout(args), **sampling}
            if args.no_stream or (args.n or 1) > 1:
                reply = client.chat(args.model, history, **call)
                _print_outputs(reply.outputs, sys.stdout)
                _print_usage(args, reply.usage)
                answer = reply.outputs[0].text if reply.outputs else ""
            else:
                parts: list[str] = []

                def tee() -> Iterator[Any]:
                    with client.chat_stream(args.model, history, **call) as stream:
                        for delta in stream:
                            if delta.index == 0:
                                parts.append(delta.text)
                            yield delta

                _print_usage(args, _print_streamed(tee(), sys.stdout))
                answer = "".join(parts)
            history.append(common_pb2.ChatMessage(role="assistant", content=answer))

        if args.message not in (None, "-"):
            turn(args.message)
            return EXIT_OK
        if args.message is None and sys.stdin is not None and sys.stdin.isatty():
            while True:
                try:
                    line = input("> ")
                except EOFError:
                    _write(sys.stdout, "\n")
                    return EXIT_OK
                if not line.strip():
                    return EXIT_OK
                turn(line)
        turn(_read_stdin_text("message"))
        return EXIT_OK

    return _guarded(args, body)


def _run_embed(args: argparse.Namespace) -> int:
    def body(client: XinserveClient) -> int:
        reply = client.embed(
            args.model,
            args.texts,
            normalize=False if args.no_normalize else None,
            request_id=args.request_id,
            timeout=_timeout(args),
        )
        vectors = [list(e.values) for e in sorted(reply.embeddings, key=lambda e: e.index)]
        if len(vectors) == 1 or args.vectors:
            for vector in vectors:
                _write(sys.stdout, "[" + ", ".join(f"{v:.7g}" for v in vector) + "]\n")
        if len(vectors) > 1:
            for i in range(len(vectors)):
                for j in range(i + 1, len(vectors)):
                    sim = cosine_similarity(vectors[i], vectors[j])
                    _write(sys.stdout, f"{sim:.6f}\t{_short(args.texts[i])}\t{_short(args.texts[j])}\n")
        return EXIT_OK

    return _guarded(args, body)


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _enum_name(enum_type: Any, value: int, prefix: str) -> str:
    try:
        name = str(enum_type.Name(value))
    except ValueError:
        return str(value)
    return name.removeprefix(prefix).lower()


def _run_models(args: argparse.Namespace) -> int:
    def body(client: XinserveClient) -> int:
        if args.name:
            model = client.get_model(args.name, timeout=_timeout(args))
            _print_model_detail(model)
            return EXIT_OK
        models = client.list_models(timeout=_timeout(args))
        rows = [("NAME", "KIND", "STATE", "VERIFICATION", "CONTEXT", "DEVICE")]
        for m in models:
            state = _enum_name(model_pb2.ModelState, m.state, "MODEL_STATE_")
            if m.state_reason:
                state = f"{state} ({m.state_reason})"
            rows.append(
                (
                    m.name,
                    _enum_name(model_pb2.ModelKind, m.kind, "MODEL_KIND_"),
                    state,
                    _enum_name(model_pb2.VerificationStatus, m.verification_status, "VERIFICATION_STATUS_"),
                    str(m.max_context_length) if m.max_context_length else "-",
                    m.device or "-",
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            _write(
                sys.stdout,
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n",
            )
        return EXIT_OK

    return _guarded(args, body)


def _print_model_detail(m: model_pb2.Model) -> None:
    fields = [
        ("name", m.name),
        ("kind", _enum_name(model_pb2.ModelKind, m.kind, "MODEL_KIND_")),
        ("state", _enum_name(model_pb2.ModelState, m.state, "MODEL_STATE_")),
        ("state_reason", m.state_reason),
        ("max_context_length", str(m.max_context_length)),
        ("dtype", m.dtype),
        ("backend", m.backend),
        ("device", m.device),
        (
            "verification",
            _enum_name(model_pb2.VerificationStatus, m.verification_status, "VERIFICATION_STATUS_"),
        ),
        ("verification_detail", m.verification_detail),
        ("manifest_digest", m.manifest_digest),
        ("lora_adapters", ", ".join(m.lora_adapters)),
    ]
    for key, value in fields:
        if value:
            _write(sys.stdout, f"{key + ':':<21}{value}\n")


if __name__ == "__main__":
    sys.exit(main())
