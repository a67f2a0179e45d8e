"""Settings declared once and parsed one way, after Kafka's ConfigDef.

Every config class (the log's, a topic's, a broker's, the producer's and the consumer's) is a
frozen dataclass whose fields are declared with `setting`: Kafka's dotted name, the type, the
default, the bounds or choices or a validator, and a line of documentation, in one place.
`ConfigDef.of` collects them in order, and `ConfigDef.parse` turns what a user gives (Kafka's
names; values typed, or the strings a properties file or ZooKeeper holds) into typed values.
Every refusal is one `InvalidConfigError` naming the key, the value and what is allowed, with
"did you mean ...?" for a misspelt name, so a bad topic, broker or client setting reads and is
caught the same way.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rafka.common.errors import ErrorCode, RafkaError

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

_NO_VALUE: Any = object()
_KEY_METADATA = "rafka.config.key"


class InvalidConfigError(RafkaError, ValueError):
    """A setting is unknown, has a wrong type or value, or conflicts with another (Kafka's
    ConfigException; the Kafka listener answers it with INVALID_CONFIG).

    The one class every layer raises for its settings. As Kafka's, it is made either from the
    key, the value given and what is allowed (`key`, `value` and `allowed` then say which), or
    from one message, for a rule across settings (`key` is then None). A ValueError too, since a
    bad setting is a bad argument.
    """

    code = ErrorCode.INVALID_CONFIG

    def __init__(self, key_or_message: str, value: Any = _NO_VALUE, allowed: str = "") -> None:
        if value is _NO_VALUE:
            self.key: str | None = None
            self.value: Any = None
            self.allowed = key_or_message
            super().__init__(key_or_message)
        else:
            self.key, self.value, self.allowed = key_or_message, value, allowed
            super().__init__(f"invalid {key_or_message}={value!r}: {allowed}")
        # Pickled (to cross between Ray actors) the error is rebuilt from its message alone;
        # its attributes travel in its __dict__.


class Type(Enum):
    """Kafka's config types, the ones rafka's settings use. Each accepts its values typed or as
    text ("5", "true"), since ZooKeeper and properties files hold text."""

    BOOLEAN = "boolean"
    INT = "int"  # 32 bits, as Kafka's INT: sizes and most timeouts
    LONG = "long"  # 64 bits, as Kafka's LONG: retention and other long durations
    STRING = "string"
    LIST = "list"  # strings, given as a list or "a,b"; kept as the text "a,b" ZooKeeper shows
    OBJECT = "object"  # anything (a callable, an assignor): the key's validator decides


_INTEGER_BOUNDS = {Type.INT: (-(2**31), INT32_MAX), Type.LONG: (-(2**63), INT64_MAX)}


def _as_boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ValueError


def _as_integer(raw: Any) -> int:
    if isinstance(raw, str):
        try:
            return int(raw.strip(), 10)
        except ValueError:
            raise ValueError from None
    if type(raw) is not int:  # bool is a subclass of int, and True is no number of bytes
        raise ValueError
    return raw


def _as_string(raw: Any) -> str:
    if not isinstance(raw, str):
        raise ValueError
    return raw


def _as_list(raw: Any) -> str:
    parts = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(parts, (list, tuple)) or not all(isinstance(p, str) for p in parts):
        raise ValueError
    return ",".join(part.strip() for part in parts)


_PARSERS: dict[Type, Callable[[Any], Any]] = {
    Type.BOOLEAN: _as_boolean,
    Type.INT: _as_integer,
    Type.LONG: _as_integer,
    Type.STRING: _as_string,
    Type.LIST: _as_list,
    Type.OBJECT: lambda raw: raw,
}


def _choose(value: str, choices: tuple[str, ...]) -> str:
    """The choice `value` names, in the choice's own spelling (case and spaces are forgiven)."""
    chosen = {choice.lower(): choice for choice in choices}.get(value.strip().lower())
    if chosen is None:
        raise ValueError
    return chosen


@dataclass(frozen=True)
class ConfigKey:
    """One setting: Kafka's name, its type, default, what values it allows, and what it does.

    Allowed values are the type's (integers within the type's bounds), narrowed by `minimum`
    and `maximum` (inclusive) or `choices` (case-insensitive, stored in the choice's spelling),
    and by `validator`: a function of the typed value that returns it (possibly normalised) or
    raises ValueError whose message says what is allowed. `nullable` lets None stand for "not
    set" (a default that depends on other settings, or no limit).
    """

    name: str
    type: Type
    default: Any = None
    doc: str = ""
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    validator: Callable[[Any], Any] | None = None
    nullable: bool = False
    # The Python name: the dataclass field, and the keyword a client accepts.
    attribute: str = ""
    # Instead of `default`, for a default the machine decides (made when a config is).
    default_factory: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if not self.attribute:
            object.__setattr__(self, "attribute", self.name.replace(".", "_"))
        if self.type in _INTEGER_BOUNDS:
            low, high = _INTEGER_BOUNDS[self.type]
            object.__setattr__(self, "minimum", low if self.minimum is None
                               else max(low, self.minimum))
            object.__setattr__(self, "maximum", high if self.maximum is None
                               else min(high, self.maximum))

    @property
    def allowed(self) -> str:
        """What a value must be, as a refusal says it."""
        if self.type in _INTEGER_BOUNDS:
            return f"expected an integer in [{self.minimum}, {self.maximum}]"
        if self.type is Type.BOOLEAN:
            return "expected true or false"
        if self.choices:
            listed = ", ".join(self.choices)
            if self.type is Type.LIST:
                return f"expected one or more of {listed}, separated by commas"
            return f"expected one of {listed}"
        if self.type is Type.LIST:
            return "expected a list of strings, or one string with commas between them"
        return "expected a string" if self.type is Type.STRING else f"not accepted: {self.doc}"

    def parse(self, raw: Any) -> Any:
        """`raw` as a value of this key, typed and normalised; parsing that again gives it back.

        Raises InvalidConfigError naming the key, `raw` and what is allowed.
        """
        if raw is None and self.nullable:
            return None
        try:
            value = _PARSERS[self.type](raw)
            if self.validator is not None:
                value = self.validator(value)
            if self.choices and self.type is Type.LIST:
                value = ",".join(_choose(part, self.choices) for part in value.split(","))
            elif self.choices:
                value = _choose(value, self.choices)
            if self.type in _INTEGER_BOUNDS and not self.minimum <= value <= self.maximum:
                raise ValueError
        except ValueError as refused:
            raise InvalidConfigError(self.name, raw, str(refused) or self.allowed) from None
        return value


def setting(
    name: str,
    type: Type,
    default: Any = dataclasses.MISSING,
    *,
    doc: str,
    default_factory: Callable[[], Any] | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
    choices: tuple[str, ...] = (),
    validator: Callable[[Any], Any] | None = None,
    nullable: bool = False,
) -> Any:
    """A dataclass field that is a config key (see `ConfigKey`): the field's default is the
    key's, so a setting is declared once, where its attribute is."""
    key = ConfigKey(
        name, type, None if default is dataclasses.MISSING else default, doc,
        minimum=minimum, maximum=maximum, choices=choices, validator=validator,
        nullable=nullable, default_factory=default_factory,
    )
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata={_KEY_METADATA: key})
    return dataclasses.field(default=default, metadata={_KEY_METADATA: key})


class ConfigDef:
    """The keys one kind of config accepts ("log", "topic", "broker", ...), in order.

    With `attribute_names`, `parse` accepts each key's Python name too (`linger_ms` as well as
    `linger.ms`), as the clients do so that settings can be keyword arguments.
    """

    def __init__(self, keys: Iterable[ConfigKey], kind: str, *,
                 attribute_names: bool = False) -> None:
        self.kind = kind
        self.keys = tuple(keys)
        self._by_spelling: dict[str, ConfigKey] = {}
        for key in self.keys:
            for spelling in {key.name, key.attribute} if attribute_names else {key.name}:
                if self._by_spelling.setdefault(spelling, key) is not key:
                    raise ValueError(f"{spelling!r} is declared twice in the {kind} config")

    @classmethod
    def of(cls, config_class: type, kind: str, *, attribute_names: bool = False) -> ConfigDef:
        """The keys declared with `setting` on a dataclass's fields, in field order."""
        return cls(
            (dataclasses.replace(field.metadata[_KEY_METADATA], attribute=field.name)
             for field in dataclasses.fields(config_class) if _KEY_METADATA in field.metadata),
            kind,
            attribute_names=attribute_names,
        )

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self.keys)

    def __getitem__(self, name: str) -> ConfigKey:
        return self._by_spelling[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_spelling

    def parse(self, *sources: Mapping[str, Any] | None) -> dict[str, Any]:
        """The settings given, typed, by attribute name: ready for the dataclass's constructor,
        which fills in the defaults of the others.

        Several sources (a dict and keyword arguments) may each give a setting, under either
        spelling, as long as they agree. None is an empty source. An unknown name, a bad value
        or a disagreement raises InvalidConfigError.
        """
        parsed: dict[str, Any] = {}
        given_as: dict[str, tuple[str, Any]] = {}
        for source in sources:
            if source is None:
                continue
            if not isinstance(source, Mapping):
                raise InvalidConfigError(
                    f"{self.kind} config must be a mapping of Kafka's names to values, got "
                    f"{type(source).__name__}"
                )
            for spelling, raw in source.items():
                key = self._by_spelling.get(spelling)
                if key is None:
                    raise self._unknown(spelling, raw)
                value = key.parse(raw)
                if key.attribute in parsed and parsed[key.attribute] != value:
                    first, first_raw = given_as[key.attribute]
                    raise InvalidConfigError(
                        spelling, raw, f"conflicts with {first}={first_raw!r} given as well"
                    )
                parsed[key.attribute] = value
                given_as[key.attribute] = (spelling, raw)
        return parsed

    def normalise(self, config: Any) -> None:
        """Parse every setting of a (frozen) dataclass in place, from its `__post_init__`: a
        config built directly is checked as one parsed from a dict is, and text becomes typed."""
        for key in self.keys:
            object.__setattr__(config, key.attribute, key.parse(getattr(config, key.attribute)))

    def to_dict(self, config: Any) -> dict[str, Any]:
        """The settings of `config` by Kafka's names, which `parse` takes back."""
        return {key.name: getattr(config, key.attribute) for key in self.keys}

    def _unknown(self, spelling: Any, raw: Any) -> InvalidConfigError:
        known = ", ".join(sorted(key.name for key in self.keys))
        close = difflib.get_close_matches(str(spelling), list(self._by_spelling), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return InvalidConfigError(
            str(spelling), raw, f"not a {self.kind} setting (known keys: {known}){hint}"
        )
