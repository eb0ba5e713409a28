"""The DSPy engine: `complete(Request) -> Response` over a transformers model loaded in this process.

DSPy 3.4.1's `dspy.LM(model, engine=obj)` calls `obj.complete(request)` once per candidate (DSPy keeps its
cache, retries, history, callbacks and its `n` fan-out: n candidates are n calls). This engine:
- serves the model named by `request.model` (a name `--model` takes: `smollm2`, `tiny`, a folder, a hub id,
  a .gguf, a run folder), loaded once (rlft.models.load_for_inference: an adapter folder merged into its base,
  in the dtype rlft.speed.precision picks), or the live policy a ReinforceJob registered under that name
  (`serve(name, model)`), so DSPy's next samples come from the weights just updated;
- renders the request with the tokenizer's chat template (system + messages, generation prompt), generates
  with the request's temperature (None or 0: greedy), top_p and max_tokens, stops at the end of turn (eos and
  the template's end-of-turn token, rlft.chat.templates.stop_token_ids) and at the request's stop strings;
- reads DSPy's ChatAdapter format off the request (its system message lists the output fields, its last user
  message names the first one): the answer is started with that field's header (`[[ ## label ## ]]` and a newline,
  a response prefix), and when the signature has a single output field the answer ends at its first blank line
  (ChatAdapter puts one between a value and the next marker; what a small model rambles on with after it would
  fail DSPy's parse). This is where it departs from a plain chat server: a 135M model given DSPy's prompt writes
  Python or prose instead of the markers (every answer a parse failure, so BootstrapFinetune keeps no trace and
  every GRPO group scores format_failure_score alike). A single output field DSPy states the values of (a
  `Literal[...]` or a `bool`) is answered by guided choice: each value's log-prob after the header is scored over
  one forward of the prompt and the most likely one is answered (sampled from their softmax at the request's
  temperature), as vLLM's guided_choice does. A single `int` / `float` field is generated under NumberGuide
  (digits only, then a stop), a single plain `str` field may not open with a placeholder or a marker (the same
  rule, given to generate as `begin_suppress_tokens` when every request of the batch is such a field, so the
  policy's fast sampling loop serves it). Requests in another format (JSONAdapter's retry, plain chats) are served
  as they are. `dspy_format=False` switches it off;
- batches: requests that arrive together (DSPy's Evaluate / bootstrap threads) wait up to `window` seconds for
  each other and go through one `generate` per distinct (temperature, top_p), padded on the left. On the CPU a
  LoRA policy's `generate` is rlft.speed.sampling's plain copy decoded by rlft.speed.decode (the path `rlft grpo`
  samples with; a guided batch goes through the copy's transformers `generate`, which takes the logits
  processor); on a GPU it is transformers' own.
No HTTP server, no litellm call, no copy of the weights to another process.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

# 30 ms: DSPy's worker threads format their next prompt in well under a millisecond after the previous batch
# returns, so they meet inside the window; a lone caller (a single Predict call) waits at most this long.
BATCH_WINDOW = 0.03
MAX_BATCH = 64
# guided choice scores this many prompts a forward (each with all its values)
CHOICE_ROWS = 8
# a response DSPy's ChatAdapter ends with: generation may stop there (the adapter ignores what follows it)
DSPY_END_MARKER = "[[ ## completed ## ]]"
_FIRST_FIELD = re.compile(r"starting with the field `(\[\[ ## \w+ ## \]\])`")
_OUTPUTS = re.compile(r"Your output fields are:\n(.*?)\nAll interactions", re.S)


_LITERAL = re.compile(r"must be formatted as a valid Python Literal\[(.*?)\]\)")
_BOOL = re.compile(r"must be formatted as a valid Python bool\)")
_NUMBER = re.compile(r"must be formatted as a valid Python (int|float)\)")
NUMBER_TOKENS = 12  # an int/float answer of at most this many tokens (SmolLM2 writes one digit a token)


def dspy_number(messages: list[dict[str, str]]) -> str | None:
    """"int" or "float" when the request is DSPy's ChatAdapter format with a single output field of that type
    (as its last user message states it), "str" for a single plain-text field (ChatAdapter states no type for
    it), else None (other types: lists, dicts, models are generated unguided)."""
    if not dspy_shape(messages)[1]:
        return None
    last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    found = _NUMBER.search(last)
    if found:
        return found.group(1)
    return "str" if "must be formatted as a valid Python" not in last else None


_MASKS: dict[tuple, tuple] = {}


def number_masks(tok, stops: tuple[int, ...]):
    """({kind: (first, later, end) token masks}, digit mask, minus ids, dot ids) for NumberGuide; cached per
    tokenizer."""
    import torch

    key = (id(tok), len(tok), stops)
    if key not in _MASKS:
        vocab_size = len(tok)
        texts = tok.batch_decode([[i] for i in range(vocab_size)])
        digits = [i for i, t in enumerate(texts) if t and t.isascii() and t.isdigit()]
        minus = [i for i, t in enumerate(texts) if t == "-"]
        dot = [i for i, t in enumerate(texts) if t == "."]
        digit_mask = torch.zeros(vocab_size, dtype=torch.bool)
        digit_mask[digits] = True
        # a str field's first token may not open a placeholder or a marker ("{label}", "[[ ## ...", "[#]")
        starts = torch.ones(vocab_size, dtype=torch.bool)
        starts[[i for i, t in enumerate(texts) if t.strip()[:1] in ("{", "[", "#", "`") or not t.strip()]] = False
        starts[list(stops)] = False
        masks = {"str": (starts, torch.ones(vocab_size, dtype=torch.bool), torch.ones(vocab_size, dtype=torch.bool))}
        for kind in ("int", "float"):
            first = digit_mask.clone()
            first[minus] = True
            later = digit_mask.clone()
            later[list(stops) + (dot if kind == "float" else [])] = True
            end = torch.zeros(vocab_size, dtype=torch.bool)
            end[list(stops)] = True
            masks[kind] = (first, later, end)
        float_first, float_later, float_end = masks["float"]
        dotted = float_later.clone()
        dotted[dot] = False
        masks["float_dotted"] = (float_first, dotted, float_end)  # a float whose answer has its one "." already
        _MASKS[key] = (masks, digit_mask, set(minus), set(dot))
    return _MASKS[key]


def str_banned_openers(tok, stops: tuple[int, ...]) -> list[int]:
    """The token ids a single `str` field's answer may not open with (NumberGuide's first-step rule for "str")."""
    starts = number_masks(tok, stops)[0]["str"][0]
    return (~starts).nonzero().squeeze(-1).tolist()


class NumberGuide:
    """A transformers LogitsProcessor that keeps a single int/float field's answer a number: only tokens made of
    digits (and a leading "-"; one "." for a float, followed by a digit) until a digit is written, then those
    or a stop token (the end of turn, a blank line); after NUMBER_TOKENS tokens only a stop. A single `str`
    field's first token may not be blank or open a placeholder, a marker or a code fence ("{", "[", "#", "`"):
    given DSPy's prompt, a 135M model otherwise copies the prompt's structure ("{label}", "[[ ## ... ## ]]")
    into the field. Rows of kind None are left alone."""

    def __init__(self, tok, kinds: list[str | None], width: int, stops: list[int]):
        self.kinds, self.width = kinds, width
        self.masks, self.digits, self.minus, self.dots = number_masks(tok, tuple(stops))

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.width
        for row, kind in enumerate(self.kinds):
            if kind is None:
                continue
            first, later, end = self.masks[kind]
            if step == 0:
                allowed = first
            elif kind == "str":
                continue
            elif step >= NUMBER_TOKENS:
                allowed = end
            elif int(input_ids[row, -1]) in self.minus or int(input_ids[row, -1]) in self.dots:
                allowed = self.digits  # a lone "-", or a "." just written: a digit must follow
            elif kind == "float" and any(int(t) in self.dots for t in input_ids[row, self.width:]):
                allowed = self.masks["float_dotted"][1]  # one "." at most ("1..5" is no float)
            else:
                allowed = later
            scores[row, ~allowed[:scores.shape[1]].to(scores.device)] = float("-inf")
        return scores


def dspy_choices(messages: list[dict[str, str]]) -> list[str] | None:
    """The values a single Literal (or bool) output field may take, as DSPy's ChatAdapter states them in the
    request's last user message; None for any other request."""
    import ast

    prefix, single = dspy_shape(messages)
    if not single:
        return None
    last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if _BOOL.search(last):
        return ["True", "False"]
    found = _LITERAL.search(last)
    if not found:
        return None
    try:
        values = ast.literal_eval("[" + found.group(1) + "]")
    except (ValueError, SyntaxError):
        return None
    return [str(v) for v in values] if values and len(values) <= 64 else None


def dspy_shape(messages: list[dict[str, str]]) -> tuple[str, bool]:
    """(response prefix, single output field) for a request in DSPy's ChatAdapter format, else ("", False)."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    last = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    first = _FIRST_FIELD.search(last)
    if not first:
        return "", False
    fields = _OUTPUTS.search(system)
    single = bool(fields) and len(re.findall(r"^\d+\. `", fields.group(1), re.M)) == 1
    return first.group(1) + "\n", single


@dataclass
class Served:
    """One loaded model: what the engine generates from, and the lock its users (generation, a training
    step) take in turn."""

    model: Any
    tok: Any
    stops: list[int]
    lock: threading.RLock = field(default_factory=threading.RLock)
    _blank_ids: list[int] | None = None

    def blank_line_ids(self) -> list[int]:
        """Token ids whose text holds a blank line ("\\n\\n"): where a single-field DSPy answer ends."""
        if self._blank_ids is None:
            vocab = self.tok.get_vocab()
            self._blank_ids = [i for i in vocab.values() if "\n\n" in self.tok.decode([i])]
        return self._blank_ids


@dataclass
class _Slot:
    request: Any
    done: bool = False
    response: Any = None
    error: BaseException | None = None


class LocalEngine:
    """A custom DSPy engine (dspy.clients.engines.base.Engine) serving local transformers models in-process."""

    def __init__(self, window: float = BATCH_WINDOW, max_batch: int = MAX_BATCH, dspy_format: bool = True):
        self.window = window
        self.max_batch = max_batch
        self.dspy_format = dspy_format
        self._served: dict[str, Served] = {}
        self._load_lock = threading.Lock()
        self._cond = threading.Condition()
        self._queue: list[_Slot] = []
        self._busy = False
        self.batches: list[int] = []  # size of every generate call (tests and the benchmark read it)

    # --- the models ---------------------------------------------------------------------------------------
    def serve(self, name: str, model, tok=None) -> Served:
        """Answer requests for `name` from `model` (a ReinforceJob's policy) from now on."""
        from rlft.chat.templates import stop_token_ids

        tok = tok or self.served(name).tok
        served = Served(model, tok, stop_token_ids(tok, model))
        old = self._served.get(name)
        if old is not None:
            served.lock = old.lock
        self._served[name] = served
        return served

    def served(self, name: str) -> Served:
        """The model for `name`, loaded at its first request."""
        with self._load_lock:
            if name not in self._served:
                from rlft.chat.templates import stop_token_ids
                from rlft.models import load_for_inference, load_tokenizer

                tok = load_tokenizer(name)
                tok.padding_side = "left"
                model = load_for_inference(name)
                self._served[name] = Served(model, tok, stop_token_ids(tok, model))
            return self._served[name]

    def forget(self, name: str) -> None:
        self._served.pop(name, None)

    # --- DSPy's contract ----------------------------------------------------------------------------------
    def complete(self, request):
        from dspy.clients.engines.base import validate_request

        validate_request(request)
        slot = _Slot(request)
        with self._cond:
            self._queue.append(slot)
            self._cond.notify_all()
            while not slot.done and self._busy:
                self._cond.wait()
            if slot.done:
                return self._answer(slot)
            self._busy = True  # this thread leads the next batch
        try:
            self._gather()
            with self._cond:
                batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            self._run(batch)
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()
        return self._answer(slot)

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass

    @staticmethod
    def _answer(slot: _Slot):
        if slot.error is not None:
            raise slot.error
        return slot.response

    def _gather(self) -> None:
        """Wait until no request has arrived for `window` seconds (or the batch is full)."""
        seen, quiet_since = -1, time.monotonic()
        while True:
            with self._cond:
                n = len(self._queue)
            now = time.monotonic()
            if n != seen:
                seen, quiet_since = n, now
            if n >= self.max_batch or now - quiet_since >= self.window:
                return
            time.sleep(self.window / 6)

    def _run(self, batch: list[_Slot]) -> None:
        groups: dict[tuple, list[_Slot]] = {}
        for slot in batch:
            c = slot.request.config
            single = self.dspy_format and dspy_shape(self.messages(slot.request))[1]
            choice = single and dspy_choices(self.messages(slot.request)) is not None
            key = (slot.request.model, float(c.temperature or 0.0), c.top_p, single, choice)
            groups.setdefault(key, []).append(slot)
        for (name, temperature, top_p, single, choice), slots in groups.items():
            try:
                if choice:
                    responses = self.choose(name, [s.request for s in slots], temperature)
                else:
                    responses = self.generate(name, [s.request for s in slots], temperature, top_p, single)
                for s, r in zip(slots, responses):
                    s.response = r
            except BaseException as exc:  # noqa: BLE001 - every waiter gets the error, none hangs
                for s in slots:
                    s.error = exc
            finally:
                with self._cond:
                    for s in slots:
                        s.done = True
                    self._cond.notify_all()

    # --- generation ---------------------------------------------------------------------------------------
    def choose(self, name: str, requests: list, temperature: float) -> list:
        """Guided choice for a single Literal / bool field: score each allowed value's tokens after the prompt
        and the field header (rlft.dspy.scoring.choice_logps: each prompt's forward once, then its values' tokens
        over the prompt's KV cache), answer the most likely one (greedy) or one
        drawn from softmax(log-prob / temperature); the answer is DSPy's format, ended by its completed marker."""
        import torch
        from dspy.lm15 import Message, Response, TextPart, Usage

        from rlft.dspy.scoring import choice_logps

        served = self.served(name)
        tok, model = served.tok, served.model
        prompts, conts, spans = [], [], []
        for r in requests:
            msgs = self.messages(r)
            prefix = dspy_shape(msgs)[0]
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) + prefix
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
            values = dspy_choices(msgs)
            conts.append([tok(v + "\n\n", add_special_tokens=False)["input_ids"] for v in values])
            spans.append((prefix, values))
        with served.lock, torch.no_grad():
            was_training = model.training
            model.eval()
            try:
                scores = []
                for k in range(0, len(prompts), CHOICE_ROWS):
                    scores += choice_logps(model, prompts[k:k + CHOICE_ROWS], conts[k:k + CHOICE_ROWS],
                                           tok.pad_token_id or 0)
            finally:
                model.train(was_training)
        self.batches.append(len(requests))
        out = []
        for r, (prefix, values), row, ids, n_prompt in zip(requests, spans, scores, conts, map(len, prompts)):
            s = torch.tensor(row)
            if temperature > 0:
                pick = int(torch.multinomial(torch.softmax(s / temperature, -1), 1))
            else:
                pick = int(s.argmax())
            text = f"{prefix}{values[pick]}\n\n{DSPY_END_MARKER}"
            n_out = len(ids[pick])
            out.append(Response(id=None, model=r.model, message=Message.assistant([TextPart(text)]),
                                finish_reason="stop", usage=Usage(input_tokens=n_prompt, output_tokens=n_out,
                                                                  total_tokens=n_prompt + n_out)))
        return out

    @staticmethod
    def messages(request) -> list[dict[str, str]]:
        """The request as chat-template messages: system first, then each message's text."""
        out = []
        if request.system is not None:
            system = request.system if isinstance(request.system, str) else "".join(
                getattr(p, "text", "") or "" for p in request.system)
            out.append({"role": "system", "content": system})
        out.extend({"role": m.role, "content": m.text or ""} for m in request.messages)
        return out

    def generate(self, name: str, requests: list, temperature: float, top_p: float | None,
                 single: bool = False) -> list:
        """One `generate` for requests that share a model, sampling settings and DSPy shape; one Response each."""
        import torch
        from dspy.lm15 import Message, Response, TextPart, Usage

        served = self.served(name)
        tok, model = served.tok, served.model
        prefixes = [dspy_shape(self.messages(r))[0] if self.dspy_format else "" for r in requests]
        texts = [tok.apply_chat_template(self.messages(r), tokenize=False, add_generation_prompt=True) + prefix
                 for r, prefix in zip(requests, prefixes)]
        stops = served.stops + (served.blank_line_ids() if single else [])
        limits = [int(r.config.max_tokens or 256) for r in requests]
        tok.padding_side = "left"
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        settings: dict[str, Any] = dict(max_new_tokens=max(limits), eos_token_id=stops,
                                        pad_token_id=tok.pad_token_id)
        kinds = [dspy_number(self.messages(r)) if single else None for r in requests]
        ends = served.stops + [i for i in served.blank_line_ids() if not tok.decode([i]).strip()] if any(kinds) else []
        if kinds and all(k == "str" for k in kinds):
            # the str guide bans first tokens only: a generation setting the fast sampling loop honours
            # (rlft.speed.decode), where a logits processor sends the batch through transformers' generate
            settings["begin_suppress_tokens"] = str_banned_openers(tok, tuple(ends))
        elif any(kinds):
            from transformers import LogitsProcessorList

            settings["logits_processor"] = LogitsProcessorList(
                [NumberGuide(tok, kinds, enc["input_ids"].shape[1], ends)])
        if temperature > 0:
            settings.update(do_sample=True, temperature=temperature, top_k=0, top_p=top_p if top_p else 1.0)
        else:
            settings.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        with served.lock, torch.no_grad():
            device = next(model.parameters()).device
            was_training = model.training
            model.eval()
            try:
                out = model.generate(input_ids=enc["input_ids"].to(device),
                                     attention_mask=enc["attention_mask"].to(device), **settings)
            finally:
                model.train(was_training)
        self.batches.append(len(requests))
        width = enc["input_ids"].shape[1]
        responses = []
        for i, r in enumerate(requests):
            ids = out[i, width:].tolist()[:limits[i]]
            finish = "length"
            stop_set = set(stops)
            for k, t in enumerate(ids):
                if t in stop_set:
                    ids, finish = ids[:k + (t not in served.stops)], "stop"  # a blank-line token is cut below
                    break
            text = prefixes[i] + tok.decode(ids, skip_special_tokens=True)
            ends = list(r.config.stop or ()) + (["\n\n"] if single else [])
            cuts = [text.find(s, len(prefixes[i])) for s in ends if s in text[len(prefixes[i]):]]
            if self.dspy_format and DSPY_END_MARKER in text:
                cuts.append(text.find(DSPY_END_MARKER) + len(DSPY_END_MARKER))
            cut = min(cuts, default=None)
            if cut is not None:
                text, finish = text[:cut], "stop"
            prompt_tokens = int(enc["attention_mask"][i].sum())
            responses.append(Response(id=None, model=r.model, message=Message.assistant([TextPart(text)]),
                                      finish_reason=finish,
                                      usage=Usage(input_tokens=prompt_tokens, output_tokens=len(ids),
                                                  total_tokens=prompt_tokens + len(ids))))
        return responses
