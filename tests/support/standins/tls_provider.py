"""Stand-in for pulumi-tls 5.6.2: `tls:index/privateKey:PrivateKey`, with real keys.

Imitates hashicorp/terraform-provider-tls (`internal/provider/resource_private_key.go`,
`common_key.go`, `common.go`; docs `docs/resources/private_key.md`), which pulumi-tls bridges:
- `algorithm` required, one of RSA, ECDSA, ED25519; `rsa_bits` default 2048, `ecdsa_curve`
  default P224 (P224, P256, P384, P521); all three RequiresReplace;
- `private_key_pem`: PKCS#1 for RSA, SEC1 for ECDSA, PKCS#8 for ED25519; `private_key_pem_pkcs8`
  always PKCS#8; `private_key_openssh`: `ssh.MarshalPrivateKey` (OpenSSH format, no
  passphrase); all three Sensitive;
- `public_key_pem` (PKIX), `public_key_openssh` (authorized_keys line with its trailing `\\n`),
  the MD5 (`aa:bb:...`) and SHA256 (`SHA256:...`, unpadded base64) OpenSSH fingerprints, empty
  for ECDSA P224 as `x/crypto/ssh` cannot encode it;
- id: hex SHA-1 of the PKIX DER public key (`hashForState`);
- a logical resource: it lives in Pulumi's state only; Read hands the state back.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from tests.support.standins.kinds import Context, Kind, enum_failure
from tests.support.standins.provider import StandinProvider, run
from tests.support.standins.schema import Failure
from tests.support.standins.values import Plain

VERSION = "5.6.2"
ALGORITHMS = ["RSA", "ECDSA", "ED25519"]
CURVES: dict[str, type[ec.EllipticCurve]] = {
    "P224": ec.SECP224R1,
    "P256": ec.SECP256R1,
    "P384": ec.SECP384R1,
    "P521": ec.SECP521R1,
}
_PEM = serialization.Encoding.PEM
_NONE = serialization.NoEncryption()

PrivateKeyType = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def generate(algorithm: str, rsa_bits: int, curve: str) -> PrivateKeyType:
    if algorithm == "RSA":
        return rsa.generate_private_key(public_exponent=65537, key_size=rsa_bits)
    if algorithm == "ECDSA":
        return ec.generate_private_key(CURVES[curve]())
    return ed25519.Ed25519PrivateKey.generate()


def key_attributes(key: PrivateKeyType, curve: str) -> Plain:
    """Every output of `tls_private_key` for one key, in the provider's encodings."""
    pem_format = (
        serialization.PrivateFormat.TraditionalOpenSSL  # PKCS#1 / SEC1, as the provider
        if not isinstance(key, ed25519.Ed25519PrivateKey)
        else serialization.PrivateFormat.PKCS8
    )
    public = key.public_key()
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    out: Plain = {
        "privateKeyPem": key.private_bytes(_PEM, pem_format, _NONE).decode(),
        "privateKeyPemPkcs8": key.private_bytes(
            _PEM, serialization.PrivateFormat.PKCS8, _NONE
        ).decode(),
        "publicKeyPem": public.public_bytes(
            _PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode(),
        "privateKeyOpenssh": "",
        "publicKeyOpenssh": "",
        "publicKeyFingerprintMd5": "",
        "publicKeyFingerprintSha256": "",
    }
    if not (isinstance(key, ec.EllipticCurvePrivateKey) and curve == "P224"):
        out["privateKeyOpenssh"] = key.private_bytes(
            _PEM, serialization.PrivateFormat.OpenSSH, _NONE
        ).decode()
        line = public.public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        ).decode()
        blob = base64.b64decode(line.split()[1])
        md5 = hashlib.md5(blob).hexdigest()  # noqa: S324 - the fingerprint format, not security
        out["publicKeyOpenssh"] = line + "\n"
        out["publicKeyFingerprintMd5"] = ":".join(md5[i : i + 2] for i in range(0, 32, 2))
        digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
        out["publicKeyFingerprintSha256"] = f"SHA256:{digest}"
    out["id"] = hashlib.sha1(der).hexdigest()  # noqa: S324 - the provider's id, not security
    return out


class PrivateKey(Kind):
    token = "tls:index/privateKey:PrivateKey"
    replace_on = frozenset(["algorithm", "rsaBits", "ecdsaCurve"])  # RequiresReplace
    computed = frozenset(["rsaBits", "ecdsaCurve"])  # plan defaults 2048 / P224
    sensitive = frozenset(["privateKeyPem", "privateKeyPemPkcs8", "privateKeyOpenssh"])

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        failures = enum_failure(inputs, "algorithm", ALGORITHMS)
        return failures + enum_failure(inputs, "ecdsaCurve", list(CURVES))

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        params: Plain = {"rsaBits": 2048, "ecdsaCurve": "P224"}
        params.update({k: v for k, v in inputs.items() if v is not None})
        key = generate(params["algorithm"], int(params["rsaBits"]), params["ecdsaCurve"])
        attributes = key_attributes(key, params["ecdsaCurve"])
        resource_id = attributes.pop("id")
        return resource_id, {**params, **attributes}


def main() -> None:
    run(StandinProvider("tls", [PrivateKey()], []), VERSION)


if __name__ == "__main__":
    main()
