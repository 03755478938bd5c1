"""`iris build`, `iris build push`, `iris codec-server` and `iris codec-key`: the images and the payload key.

Why a module of their own: these commands act on images and keys, not on a cluster; iris.cli.main
registers them on its app.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from iris.cli.common import err, fail, out
from iris.cli.parsing import parse_pair

build_app = typer.Typer(help="Images.", invoke_without_command=True)
TagOpt = Annotated[str, typer.Option(help="image tag")]
DockerHostOpt = Annotated[str | None, typer.Option("--docker-host", envvar="DOCKER_HOST", help="docker engine URL")]


@build_app.callback()
def build(
    ctx: typer.Context,
    tag: TagOpt = "latest",
    context: Annotated[Path, typer.Option(help="the Iris source checkout (build context)")] = Path(),
    build_arg: Annotated[list[str] | None, typer.Option("--build-arg", help="K=V passed to the Dockerfiles")] = None,
    docker_host: DockerHostOpt = None,
) -> None:
    """Build the iris-controller, iris-worker and iris-task images (then `iris build push --registry R`)."""
    if ctx.invoked_subcommand is not None:
        return
    from iris.deploy.build import BuildError, build_images

    try:
        args = dict(parse_pair(a, "--build-arg") for a in build_arg or [])
        built = build_images(context, tag=tag, build_args=args, docker_host=docker_host,
                             on_line=lambda line: err.print(line, markup=False, highlight=False))
    except (ValueError, BuildError) as e:
        raise fail(str(e), 1) from None
    for image in built:
        out.print(f"built {image.ref} {image.image_id}", markup=False, highlight=False)


@build_app.command("push")
def build_push(
    registry: Annotated[str, typer.Option(help="registry (and path) to push to, e.g. ghcr.io/acme")],
    tag: TagOpt = "latest",
    docker_host: DockerHostOpt = None,
) -> None:
    """Push the built images to REGISTRY/<name>:<tag>."""
    from iris.deploy.build import BuildError, push_images

    try:
        pushed = push_images(registry, tag=tag, docker_host=docker_host,
                             on_line=lambda line: err.print(line, markup=False, highlight=False))
    except (ValueError, BuildError) as e:
        raise fail(str(e), 1) from None
    for ref in pushed:
        out.print(f"pushed {ref}", markup=False, highlight=False)


def codec_server(
    port: Annotated[int, typer.Option(help="port to listen on")] = 8081,
    host: Annotated[str, typer.Option(help="address to listen on (keep it loopback: it decrypts)")] = "127.0.0.1",
    ui_origin: Annotated[
        list[str] | None, typer.Option("--ui-origin", help="Temporal UI origin allowed to call it, e.g. http://localhost:8233")
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option(help="file holding the bearer token callers must send (or IRIS_CODEC_SERVER_TOKEN)")
    ] = None,
    oidc_issuer: Annotated[
        str | None, typer.Option(help="accept OIDC access tokens signed by this issuer (the Temporal UI's SSO)")
    ] = None,
    oidc_audience: Annotated[str | None, typer.Option(help="the audience OIDC access tokens must name")] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="let any caller that reaches the port decode (loopback + origins only)")
    ] = False,
    iris_api: Annotated[
        str | None, typer.Option("--iris-api", help="team mode: accept the Iris tokens of this API's admins")
    ] = None,
) -> None:
    """Decrypt Iris payloads for your Temporal UI session (needs IRIS_CODEC_KEY or IRIS_CODEC_KEY_FILE).

    Callers authenticate with a bearer token (--token-file / IRIS_CODEC_SERVER_TOKEN) or an OIDC
    access token (--oidc-issuer); docs/operators.md (Encryption) gives the threat model.
    """
    from aiohttp import web

    from iris.security.codec import EncryptionCodec, load_key
    from iris.security.codec_server import TOKEN_ENV, Authenticator, NoAuth, OidcAuth, TokenAuth, make_app

    try:
        key = load_key()
        token = token_file.read_text().strip() if token_file is not None else os.environ.get(TOKEN_ENV, "")
        source = "--token-file" if token_file is not None else TOKEN_ENV
        auths: list[Authenticator] = [TokenAuth(token, source)] if token else []
    except OSError as e:
        raise fail(f"--token-file: cannot read {token_file}: {e.strerror or e}") from None
    except ValueError as e:
        raise fail(str(e)) from None
    if key is None:
        raise fail("codec-server needs the key: set IRIS_CODEC_KEY or IRIS_CODEC_KEY_FILE")
    if oidc_issuer:
        auths.append(OidcAuth(oidc_issuer, oidc_audience))
    if iris_api:
        from iris.auth.codec_gate import IrisApiAuth

        auths.append(IrisApiAuth(iris_api))
    if no_auth and not auths:
        auths = [NoAuth()]
    if len(auths) > 1:
        raise fail("codec-server: give one of a token, --oidc-issuer or --iris-api")
    if not auths:
        raise fail("codec-server needs one way to authenticate callers: --token-file (or IRIS_CODEC_SERVER_TOKEN), "
                    "--oidc-issuer, --iris-api, or --no-auth")
    codec = EncryptionCodec(key)
    err.print(f"codec server for key {codec.key_id} on http://{host}:{port} ({type(auths[0]).__name__})")
    web.run_app(make_app(codec, tuple(ui_origin or ()), auths[0]), host=host, port=port, print=None)


def codec_key() -> None:
    """Print a new random payload encryption key (base64), for IRIS_CODEC_KEY or a key file."""
    from iris.security.codec import generate_key

    out.print(generate_key(), markup=False, highlight=False)
