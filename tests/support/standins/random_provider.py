"""Stand-in for pulumi-random 4.21.4: `random:index/randomPassword:RandomPassword`.

Imitates hashicorp/terraform-provider-random (`internal/provider/resource_password.go`, the
resource pulumi-random bridges, and `internal/random/string.go`, which draws the characters):
- every attribute RequiresReplace (keepers only when its values are not null); `length` is
  required, at least 1 and at least the sum of the `min_*`; one of upper/lower/numeric/special
  must be true; defaults `special`/`upper`/`lower`/`numeric`/`number` true, `min_*` 0;
- the characters: `min_*` drawn from each class first, the rest from the enabled classes, then
  shuffled, all from the OS's CSPRNG (`secrets`, as Go's `crypto/rand`); specials
  `!@#$%&*()-_=+[]{}<>:?` unless `override_special`;
- `result` and `bcrypt_hash` (bcrypt of the result, default cost 10) are Sensitive; id `none`;
- a logical resource: it lives in Pulumi's state only; Read hands the state back.
"""

from __future__ import annotations

import secrets
from typing import Any

import bcrypt

from tests.support.standins.kinds import Context, Kind
from tests.support.standins.provider import StandinProvider, run
from tests.support.standins.schema import Failure
from tests.support.standins.values import UNKNOWN, Plain

VERSION = "4.21.4"
NUMERIC = "0123456789"
LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
SPECIAL = "!@#$%&*()-_=+[]{}<>:?"
_FLAGS = ("special", "upper", "lower", "numeric", "number")
_MINIMUMS = ("minNumeric", "minUpper", "minLower", "minSpecial")


def create_string(params: dict[str, Any]) -> str:
    """`random.CreateString`: minimums per class first, then the rest, then a shuffle."""
    special = params.get("overrideSpecial") or SPECIAL
    chars = "".join(
        pool
        for flag, pool in (
            ("upper", UPPER),
            ("lower", LOWER),
            ("numeric", NUMERIC),
            ("special", special),
        )
        if params[flag]
    )
    if not chars:
        raise ValueError("the character set specified is empty")
    result = [
        secrets.choice(pool)
        for key, pool in (
            ("minNumeric", NUMERIC),
            ("minLower", LOWER),
            ("minUpper", UPPER),
            ("minSpecial", special),
        )
        for _ in range(int(params[key]))
    ]
    result += [secrets.choice(chars) for _ in range(int(params["length"]) - len(result))]
    order = [secrets.randbits(8) for _ in result]
    return "".join(c for _, c in sorted(zip(order, result, strict=True), key=lambda p: p[0]))


class RandomPassword(Kind):
    token = "random:index/randomPassword:RandomPassword"
    replace_on = frozenset(
        ["length", "keepers", "overrideSpecial", *_FLAGS, *_MINIMUMS]
    )  # every attribute RequiresReplace (resource_password.go, `passwordSchemaV3`)
    computed = frozenset([*_FLAGS, *_MINIMUMS])  # plan defaults (booldefault/int64default)
    sensitive = frozenset(["result", "bcryptHash"])

    def validate(self, inputs: Plain, ctx: Context) -> list[Failure]:
        length = inputs.get("length")
        failures = []
        if isinstance(length, int | float):
            minimum = sum(int(v) for k in _MINIMUMS if isinstance(v := inputs.get(k), int | float))
            if length < max(1, minimum):
                failures.append(
                    Failure(
                        "length",
                        f"Attribute length value must be at least sum of min_upper, min_lower, "
                        f"min_numeric, min_special and 1, got: {int(length)}",
                    )
                )
        flags = [inputs.get(k) for k in ("upper", "lower", "numeric", "special")]
        if UNKNOWN not in flags and all(flag is False for flag in flags):
            failures.append(
                Failure(
                    "numeric",
                    "At least one attribute out of [special upper lower numeric] must be "
                    "specified as true",
                )
            )
        return failures

    def create(self, ctx: Context, inputs: Plain) -> tuple[str, Plain]:
        params: Plain = {**{k: True for k in _FLAGS}, **{k: 0 for k in _MINIMUMS}}
        params.update({k: v for k, v in inputs.items() if v is not None})
        result = create_string(params)
        params["result"] = result
        params["bcryptHash"] = bcrypt.hashpw(result.encode(), bcrypt.gensalt(10)).decode()
        return "none", params

    def update(self, ctx: Context, resource_id: str, olds: Plain, news: Plain) -> Plain:
        # Only keepers' null values reach an update (everything else replaces): keep the rest.
        return {**olds, **news}


def main() -> None:
    run(StandinProvider("random", [RandomPassword()], []), VERSION)


if __name__ == "__main__":
    main()
