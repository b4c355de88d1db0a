"""What an UNAVAILABLE over TLS most likely means, said in the error: a certificate that fails verification
is not retryable (retrying cannot fix it); a failed handshake names the flags to check."""

from __future__ import annotations

from fedort.common.errors import CertificateError, FedortError


def with_plaintext_hint(exc: FedortError, details: str) -> FedortError:
    """`exc` (an UNAVAILABLE from a plaintext channel) with a hint when the coordinator hung up on the
    connection at once, which is how a TLS server answers a plaintext HTTP/2 preface."""
    low = details.lower()
    if any(w in low for w in ("socket closed", "connection reset", "ssl", "tls", "handshake")):
        exc.args = (
            f"{exc.args[0]} [the coordinator closed the plaintext connection: it probably serves TLS; "
            "drop --insecure and pass --ca-file with the CA that signed its certificate]",
        )
    return exc


def with_tls_hint(exc: FedortError, details: str) -> FedortError:
    """`exc` (an UNAVAILABLE from a TLS channel) with a hint when `details` point at TLS."""
    low = details.lower()
    if "certificate_verify_failed" in low or "certificate verify failed" in low:
        cert = CertificateError(
            f"{exc.args[0]} [the coordinator's TLS certificate failed verification, which retrying cannot "
            "fix: check that --ca-file is the CA that signed it and that it names the address you dial]"
        )
        cert.code = exc.code
        return cert
    if any(w in low for w in ("ssl", "tls", "handshake", "certificate")):
        hint = (
            "TLS handshake with the coordinator failed: check that --ca-file is the CA that signed its "
            "certificate and that the certificate names the address you dial (or, for a plaintext "
            "coordinator, pass --insecure)"
        )
    elif "socket closed" in low or "connection reset" in low:
        hint = (
            "the coordinator closed the connection during the TLS handshake: it may require a client "
            "certificate (mutual TLS: --cert-file/--key-file)"
        )
    else:
        return exc
    exc.args = (f"{exc.args[0]} [{hint}]",)
    return exc
