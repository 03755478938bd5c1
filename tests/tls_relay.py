"""A test CA, certificates made with `cryptography`, and a TLS-terminating relay in front of a dev server.

The Temporal dev server speaks plain gRPC only, so mutual TLS is tested the way a team's load
balancer or Temporal's own frontend would do it: a relay that requires a client certificate
signed by our CA, terminates TLS on loopback and forwards the bytes to the dev server.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of PEM files: the CA, the server's certificate (127.0.0.1/localhost) and one client's."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_client_cert: Path
    """A client certificate from a CA the relay does not trust."""
    other_client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
    *, ca: bool = False, server: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False),
            critical=True,
        )
    elif server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def make_pki(directory: Path, client_name: str = "alice@example.com") -> Pki:
    """A fresh CA with a server and a client certificate, plus a client certificate from a stranger CA."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("iris test CA", ca_key, _name("iris test CA"), ca_key, ca=True)
    ca_path, _ = _write(directory, "ca", ca_cert, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _write(directory, "server", _issue("localhost", server_key, ca_cert.subject, ca_key, server=True),
                    server_key)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _write(directory, "client", _issue(client_name, client_key, ca_cert.subject, ca_key), client_key)
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger_ca = _issue("stranger CA", stranger_key, _name("stranger CA"), stranger_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _write(directory, "other", _issue("mallory", other_key, stranger_ca.subject, stranger_key), other_key)
    return Pki(ca_path, *server, *client, *other)


class TlsRelay:
    """Accept mutual-TLS connections on 127.0.0.1 and pipe them to a plain TCP `target` (its own loop thread)."""

    def __init__(self, pki: Pki, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
        self.context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.set_alpn_protocols(["h2"])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="tls-relay", daemon=True)
        self.relayed = 0
        """Connections that completed the TLS handshake (a valid client certificate) and were forwarded."""
        self.port = 0

    async def _start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.context,
                                            ssl_handshake_timeout=10)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.relayed += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    @contextlib.contextmanager
    def running(self) -> Iterator[TlsRelay]:
        self.thread.start()
        server = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        try:
            yield self
        finally:
            async def stop() -> None:
                server.close()
                for task in asyncio.all_tasks():
                    if task is not asyncio.current_task():
                        task.cancel()

            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
