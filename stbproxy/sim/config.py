"""Which simulator a proxy runs and how: ``SimulatorConfig`` (name, model, limits), and
``chosen``'s rule for when none is named (an LLM when one is configured, else the
offline schema simulator)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from stbproxy.errors import ConfigError

SIMULATORS = ("llm", "mirrorapi", "schema", "off")
MODEL_SIMULATORS = ("llm", "mirrorapi")  # the simulators that ask a model
DEFAULT_MODEL = "gpt-4o-mini"
# StableToolBench's MirrorAPI server: the model it asks for when its configuration names
# none, and the temperature its configuration ships with.
MIRRORAPI_MODEL = "simulation-250123-qwen25-mixed"
MIRRORAPI_TEMPERATURE = 0.1
# --mirrorapi-parse: replies read as StableToolBench's server reads them, once; or recovered, thrice.
MIRRORAPI_PARSE = ("stb", "recover")
# --mirrorapi-unknown: an API the tool docs do not hold fails as there (HTTP 500), or is asked for.
MIRRORAPI_UNKNOWN = ("fail", "prompt")


@dataclass(frozen=True)
class SimulatorConfig:
    name: str | None = None  # one of SIMULATORS; None lets chosen() decide
    model: str | None = None  # None: DEFAULT_MODEL
    temperature: float | None = None  # None: MIRRORAPI_TEMPERATURE for mirrorapi, else 0
    max_tokens: int | None = 1024
    seed: int | None = None
    concurrency: int = 16  # LLM calls in flight at most
    timeout: float = 60.0  # seconds per LLM HTTP call
    max_retries: int = 2  # the openai client's own retries of transport errors, 429 and 5xx
    example_budget: int = 2048  # characters shared by all examples in a prompt
    max_examples: int = 5
    base_url: str | None = None  # None: the client reads OPENAI_BASE_URL
    api_key: str | None = None  # None: the client reads OPENAI_API_KEY
    system_prompt: str | None = None  # the model's system prompt, read from the user's file
    template: Any = None  # a prompt_file.PromptTemplate: the messages the model was trained on
    mirrorapi_parse: str = "stb"  # MIRRORAPI_PARSE
    mirrorapi_unknown: str = "fail"  # MIRRORAPI_UNKNOWN

    def __post_init__(self) -> None:
        if self.name is not None and self.name not in SIMULATORS:
            raise ConfigError(f"unknown simulator {self.name!r}: choose one of {', '.join(SIMULATORS)}")
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise ConfigError(f"simulator temperature {self.temperature} must be between 0 and 2")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ConfigError("simulator max tokens must be 1 or more")
        if self.concurrency < 1:
            raise ConfigError("simulator concurrency must be 1 or more")
        if self.timeout <= 0:
            raise ConfigError("simulator timeout must be positive")
        if self.max_retries < 0 or self.max_examples < 0 or self.example_budget < 0:
            raise ConfigError("simulator retries, examples and example budget cannot be negative")
        if self.mirrorapi_parse not in MIRRORAPI_PARSE:
            raise ConfigError(f"--mirrorapi-parse must be one of {', '.join(MIRRORAPI_PARSE)}, "
                              f"not {self.mirrorapi_parse!r}")
        if self.mirrorapi_unknown not in MIRRORAPI_UNKNOWN:
            raise ConfigError(f"--mirrorapi-unknown must be one of {', '.join(MIRRORAPI_UNKNOWN)}, "
                              f"not {self.mirrorapi_unknown!r}")

    @property
    def model_name(self) -> str:
        return self.model or (MIRRORAPI_MODEL if self.name == "mirrorapi" else DEFAULT_MODEL)

    @property
    def sampling_temperature(self) -> float | int:
        """The temperature sent; a whole number as one (``0``, as StableToolBench's YAML
        configuration gives it, where ``0.0`` would be other bytes of the same request)."""
        temperature = self.temperature
        if temperature is None:
            temperature = MIRRORAPI_TEMPERATURE if self.name == "mirrorapi" else 0
        return int(temperature) if float(temperature).is_integer() else temperature

    @property
    def mirrorapi_defaults(self) -> bool:
        """Whether the mirrorapi options are left at StableToolBench's behaviour."""
        return (self.mirrorapi_parse, self.mirrorapi_unknown) == (MIRRORAPI_PARSE[0], MIRRORAPI_UNKNOWN[0])

    def llm_configured(self, env: Mapping[str, str] | None = None) -> bool:
        env = os.environ if env is None else env
        return bool(self.model or self.base_url or self.api_key
                    or env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"))

    def chosen(self, env: Mapping[str, str] | None = None) -> str:
        """The simulator asked for, else "llm" when an LLM is configured, else the offline "schema"."""
        if self.name is not None:
            return self.name
        return "llm" if self.llm_configured(env) else "schema"
