"""How the pulumi-command stand-in reads SSH keys: as golang.org/x/crypto/ssh (v0.48.0) reads them.

pulumi-command 1.2.1's `SSHConfig` (`provider/pkg/provider/remote/connection.go`) parses the
`hostKey` input with x/crypto's `ParseAuthorizedKey` and the `privateKey` input with
`ParsePrivateKey` / `ParsePrivateKeyWithPassphrase`; which text they accept, which block they
take and the words of their errors are what a user sees. So the key is found here as x/crypto
finds it (`pem_decode`: Go's `encoding/pem.Decode`; `go_base64`: Go's `base64.StdEncoding`;
the authorized-keys line format) and only then handed to asyncssh to build. `go_quote` is Go's
`%q`, which pulumi-command's errors quote commands with.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass

import asyncssh


class SshError(Exception):
    """A failure in the words pulumi-command's Go would report it."""


def parse_authorized_key(text: str) -> asyncssh.SSHKey:
    """x/crypto keys.go `ParseAuthorizedKey`, as `SSHConfig` (connection.go) calls it for the
    host key, its error wrapped "failed to parse host key: %w". Line by line (up to a "\\r"),
    blank and "#" lines skipped: the words after the first are the key (the first word, the
    type, is ignored: the type comes from the blob; x/crypto after v0.48.0 refuses a type word
    that differs, pulumi-command 1.2.1 pins v0.48.0); failing that, the first word is taken for
    options (commas, double quotes) and the words after the next one are tried. No key: "ssh: no
    key found", with "; last parsing error for ignored line: ERR" when a line failed."""
    last: str | None = None
    for raw in text.encode().split(b"\n"):
        line = raw.split(b"\r", 1)[0].strip()
        if not line or line.startswith(b"#"):
            continue
        for candidate in (line, _without_options(line)):
            found = _key_after_first_word(candidate) if candidate else None
            if found is None:
                break  # no second word: the next line
            if isinstance(found, asyncssh.SSHKey):
                return found
            last = found
    found = "ssh: no key found"
    if last is not None:
        found += f"; last parsing error for ignored line: {last}"
    raise SshError(f"failed to parse host key: {found}")


def _key_after_first_word(line: bytes) -> asyncssh.SSHKey | str | None:
    """The key in the words after the first, or the reason it is none; None: one word only."""
    space = _index_any(line, b" \t")
    if space < 0:
        return None
    try:
        return _parse_key_field(line[space:])
    except SshError as error:
        return str(error)


def _without_options(line: bytes) -> bytes | None:
    """The line after its options field (commas, a double quote hiding "," and " "), or None
    when nothing follows it (an unmatched quote)."""
    in_quote = False
    index = 0
    for index, byte in enumerate(line):
        if not in_quote and byte in b" \t":
            break
        if byte == ord('"') and (index == 0 or line[index - 1] != ord("\\")):
            in_quote = not in_quote
    while index < len(line) and line[index] in b" \t":
        index += 1
    return line[index:] if index < len(line) else None


def _index_any(data: bytes, chars: bytes) -> int:
    """Go's `bytes.IndexAny`: the first index of any of `chars`, else -1."""
    return next((i for i, byte in enumerate(data) if byte in chars), -1)


#: x/crypto keys.go `parsePubKey`'s key formats, with the number of wire strings (mpints, curve
#: names, points, application) each one's parser reads after the algorithm name.
KEY_FIELDS = {
    "ssh-rsa": 2,
    "ssh-dss": 4,
    "ecdsa-sha2-nistp256": 2,
    "ecdsa-sha2-nistp384": 2,
    "ecdsa-sha2-nistp521": 2,
    "sk-ecdsa-sha2-nistp256@openssh.com": 3,
    "ssh-ed25519": 1,
    "sk-ssh-ed25519@openssh.com": 2,
}
#: keys.go `keyFormatForAlgorithm`: signature algorithms that are no key format.
SIGNATURE_FORMATS = {
    "rsa-sha2-256": "ssh-rsa",
    "rsa-sha2-512": "ssh-rsa",
    "rsa-sha2-256-cert-v01@openssh.com": "ssh-rsa-cert-v01@openssh.com",
    "rsa-sha2-512-cert-v01@openssh.com": "ssh-rsa-cert-v01@openssh.com",
}


def _parse_key_field(field: bytes) -> asyncssh.SSHKey:
    """keys.go `parseAuthorizedKey`: the first word base64 (Go's `StdEncoding`), then
    `ParsePublicKey` on the blob: its algorithm name picks the parser, leftovers are "ssh:
    trailing junk in public key", a missing field "ssh: short read". Certificates (which x/crypto
    also takes) are refused by name here."""
    word = field.strip()
    space = _index_any(word, b" \t")
    blob = go_base64(word if space < 0 else word[:space])
    algorithm, rest = _ssh_string(blob)
    name = algorithm.decode(errors="replace")
    if name not in KEY_FIELDS:
        if name in SIGNATURE_FORMATS:
            raise SshError(
                f"ssh: signature algorithm {go_quote(name)} isn't a key format; key is malformed "
                f"and should be re-encoded with type {go_quote(SIGNATURE_FORMATS[name])}"
            )
        if name.endswith("-cert-v01@openssh.com"):
            raise SshError(f"the command stand-in takes no certificate as a host key ({name})")
        raise SshError(f"ssh: unknown key algorithm: {name}")
    fields = []
    for _ in range(KEY_FIELDS[name]):
        value, rest = _ssh_string(rest)
        fields.append(value)
    if name in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com") and len(fields[0]) != 32:
        raise SshError(f"invalid size {len(fields[0])} for Ed25519 public key")  # parseED25519
    try:
        key = asyncssh.import_public_key(
            f"{name} {base64.b64encode(blob[: len(blob) - len(rest)]).decode()}"
        )
    except (asyncssh.KeyImportError, ValueError) as error:
        raise SshError(f"ssh: invalid {name} public key ({error})") from error
    if rest:
        raise SshError("ssh: trailing junk in public key")  # ParsePublicKey
    return key


def _ssh_string(data: bytes) -> tuple[bytes, bytes]:
    """x/crypto messages.go `parseString`: a uint32 length and that many bytes; "ssh: short read"
    when they are not all there."""
    if len(data) < 4 or len(data) - 4 < int.from_bytes(data[:4], "big"):
        raise SshError("ssh: short read")
    end = 4 + int.from_bytes(data[:4], "big")
    return data[4:end], data[end:]


#: Go's `base64.StdEncoding` alphabet.
_BASE64 = {
    byte: value
    for value, byte in enumerate(
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    )
}


def go_base64(src: bytes) -> bytes:
    """Go's `base64.StdEncoding.Decode` (`decodeQuantum`), padding required, its error
    `CorruptInputError` ("illegal base64 data at input byte N") at the offset Go reports. The
    input holds no "\\r" or "\\n" here (Go skips those)."""
    out = bytearray()
    index = 0
    while index < len(src):
        values: list[int] = []
        for taken in range(4):
            if index == len(src):
                raise SshError(f"illegal base64 data at input byte {index - taken}")
            byte = src[index]
            index += 1
            if byte in _BASE64:
                values.append(_BASE64[byte])
                continue
            if byte != ord("=") or taken < 2:
                raise SshError(f"illegal base64 data at input byte {index - 1}")
            if taken == 2:  # "==" expected
                if index == len(src):
                    raise SshError(f"illegal base64 data at input byte {len(src)}")
                if src[index] != ord("="):
                    raise SshError(f"illegal base64 data at input byte {index - 1}")
                index += 1
            if index < len(src):
                raise SshError(f"illegal base64 data at input byte {index}")  # trailing garbage
            break
        number = sum(value << (18 - 6 * i) for i, value in enumerate(values))
        out += number.to_bytes(3, "big")[: len(values) - 1]
    return bytes(out)


@dataclass(frozen=True)
class PemBlock:
    """Go's `pem.Block`: the type ("OPENSSH PRIVATE KEY"), the headers, the decoded body."""

    kind: str
    headers: Mapping[str, str]
    body: bytes

    def text(self) -> str:
        """The block alone, re-encoded (for asyncssh to read the same block Go took)."""
        headers = sorted(self.headers.items(), key=lambda item: item[0] != "Proc-Type")
        lines = [f"-----BEGIN {self.kind}-----", *(f"{k}: {v}" for k, v in headers)]
        if headers:
            lines.append("")
        encoded = base64.b64encode(self.body).decode()
        lines += [encoded[i : i + 64] for i in range(0, len(encoded), 64)]
        return "\n".join([*lines, f"-----END {self.kind}-----", ""])


def pem_decode(data: bytes) -> PemBlock | None:
    """Go's `encoding/pem.Decode` (Go 1.26): the first END line, the last BEGIN line before it
    at a line's start, its "Key: value" headers, the base64 body (spaces, tabs and line breaks
    dropped), the END line of the same type with nothing after it but blanks; a candidate that
    fails any of these is skipped for the next END. None when no block is found."""
    rest = data
    end_trailer = 0
    while True:
        if end_trailer < 0 or end_trailer > len(rest):
            return None
        rest = rest[end_trailer:]
        end = rest.find(b"\n-----END ")
        if end < 0:
            return None
        end_trailer = end + len(b"\n-----END ")
        begin = rest.rfind(b"-----BEGIN ", 0, end)
        if begin < 0 or (begin > 0 and rest[begin - 1] != ord("\n")):
            continue
        skip = begin + len(b"-----BEGIN ")
        rest, end, end_trailer = rest[skip:], end - skip, end_trailer - skip
        type_line, rest, consumed = _get_line(rest)
        end, end_trailer = end - consumed, end_trailer - consumed
        if not type_line.endswith(b"-----"):
            continue
        kind = type_line[: -len(b"-----")]
        headers: dict[str, str] = {}
        while True:
            if not rest:
                return None
            line, following, consumed = _get_line(rest)
            key, colon, value = line.partition(b":")
            if not colon:
                break
            headers[key.strip().decode(errors="replace")] = value.strip().decode(errors="replace")
            rest, end, end_trailer = following, end - consumed, end_trailer - consumed
        if headers and end < 0:
            continue
        if end_trailer < 0:
            return None
        trailer = rest[end_trailer:]
        size = len(kind) + len(b"-----")
        if len(trailer) < size:
            continue
        after, trailer = trailer[size:], trailer[:size]
        if not trailer.startswith(kind) or not trailer.endswith(b"-----"):
            continue
        if _get_line(after)[0]:
            continue
        body = b""
        if end > 0:
            try:
                body = go_base64(bytes(b for b in rest[:end] if b not in b" \t\r\n"))
            except SshError:
                continue
        return PemBlock(kind.decode(errors="replace"), headers, body)


def _get_line(data: bytes) -> tuple[bytes, bytes, int]:
    """encoding/pem `getLine`: the line (its "\\r\\n" or "\\n" and trailing blanks dropped), the
    rest, and how many bytes were consumed."""
    newline = data.find(b"\n")
    if newline < 0:
        return data.rstrip(b" \t"), b"", len(data)
    line = data[:newline]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.rstrip(b" \t"), data[newline + 1 :], newline + 1


#: keys.go `ParseRawPrivateKey`'s block types, and those `ParseRawPrivateKeyWithPassphrase`
#: decrypts (legacy PEM encryption).
KEY_BLOCKS = ("RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY",
              "OPENSSH PRIVATE KEY")  # fmt: skip
ENCRYPTED_BLOCKS = ("RSA PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY")
OPENSSH_MAGIC = b"openssh-key-v1\x00"


def parse_private_key(text: str, passphrase: str | None) -> asyncssh.SSHKey:
    """x/crypto keys.go `ParsePrivateKey` (`ParseRawPrivateKey`), or with `privateKeyPassword`
    `ParsePrivateKeyWithPassphrase` (`ParseRawPrivateKeyWithPassphrase`), as `SSHConfig` picks
    (its error returned as is). The first PEM block decides: none, "ssh: no key found". Without
    a passphrase, a block with "ENCRYPTED" in its Proc-Type, or an OpenSSH key with a cipher or
    KDF, is "ssh: this private key is passphrase protected", a type other than `KEY_BLOCKS`
    "ssh: unsupported key type". With one, an OpenSSH key without cipher or KDF is "ssh: key is
    not password protected", any other block without legacy encryption (Proc-Type ENCRYPTED and
    DEK-Info) "ssh: not an encrypted key", a wrong passphrase "x509: decryption password
    incorrect". asyncssh then reads the block."""
    block = pem_decode(text.encode())
    if block is None:
        raise SshError("ssh: no key found")
    encrypted = "ENCRYPTED" in block.headers.get("Proc-Type", "")  # encryptedBlock
    if passphrase is None:
        if encrypted:
            raise SshError("ssh: this private key is passphrase protected")
        if block.kind not in KEY_BLOCKS:
            raise SshError(f"ssh: unsupported key type {go_quote(block.kind)}")
        if block.kind == "OPENSSH PRIVATE KEY":
            cipher, kdf, kdf_options = _openssh_envelope(block.body)
            if kdf != b"none" or cipher != b"none":  # unencryptedOpenSSHKey
                raise SshError("ssh: this private key is passphrase protected")
            if kdf_options:
                raise SshError("ssh: invalid openssh private key")
    elif block.kind == "OPENSSH PRIVATE KEY":
        cipher, kdf, _ = _openssh_envelope(block.body)
        if kdf == b"none" or cipher == b"none":  # passphraseProtectedOpenSSHKey
            raise SshError("ssh: key is not password protected")
    elif not encrypted or "DEK-Info" not in block.headers:  # x509.IsEncryptedPEMBlock
        raise SshError("ssh: not an encrypted key")
    try:
        key = asyncssh.import_private_key(block.text(), passphrase)
    except (asyncssh.KeyImportError, ValueError) as error:
        reason = str(error).lower()
        if passphrase is not None and ("passphrase" in reason or "decrypt" in reason):
            raise SshError("x509: decryption password incorrect") from error
        raise SshError(f"ssh: cannot parse the {block.kind} block ({error})") from error
    if passphrase is not None and block.kind not in (*ENCRYPTED_BLOCKS, "OPENSSH PRIVATE KEY"):
        raise SshError(f"ssh: unsupported key type {go_quote(block.kind)}")  # after decrypting
    return key


def _openssh_envelope(body: bytes) -> tuple[bytes, bytes, bytes]:
    """keys.go `parseOpenSSHPrivateKey` up to its decrypt function: the magic ("ssh: invalid
    openssh private key format"), `openSSHEncryptedPrivateKey` (cipher, KDF, KDF options, key
    count, public key, private block; "ssh: short read" when cut), one key only."""
    if not body.startswith(OPENSSH_MAGIC):
        raise SshError("ssh: invalid openssh private key format")
    rest = body[len(OPENSSH_MAGIC) :]
    if not rest:
        raise SshError("ssh: parse error in message type 0")  # Unmarshal of nothing
    cipher, rest = _ssh_string(rest)
    kdf, rest = _ssh_string(rest)
    kdf_options, rest = _ssh_string(rest)
    if len(rest) < 4:
        raise SshError("ssh: short read")
    count, rest = int.from_bytes(rest[:4], "big"), rest[4:]
    for _ in range(2):
        _, rest = _ssh_string(rest)
    if count != 1:
        raise SshError("ssh: multi-key files are not supported")
    return cipher, kdf, kdf_options


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
               "\v": "\\v", "\\": "\\\\", '"': '\\"'}  # fmt: skip


def go_quote(text: str) -> str:
    """Go's `%q` (`strconv.Quote`): double quotes, C escapes, printable runes kept as they are,
    other runes as \\xNN, \\uNNNN or \\UNNNNNNNN."""
    out = []
    for char in text:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'
