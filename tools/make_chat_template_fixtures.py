#!/usr/bin/env python3
"""Writes tests/fixtures/chat_templates/expected.json: transformers' renderings of chat
templates, which tests/test_chat_template.c compares with handgrad's renderer (src/data/
chat_template.c) byte for byte, so Python stays out of the test.

The templates, one <family>.jinja each, are committed verbatim:
  llama3.1, llama3.2, qwen2.5, gemma2, phi3.5
      llama.cpp's models/templates/ (meta-llama-Llama-3.1-8B-Instruct.jinja,
      meta-llama-Llama-3.2-3B-Instruct.jinja, Qwen-Qwen2.5-7B-Instruct.jinja,
      google-gemma-2-2b-it.jinja, microsoft-Phi-3.5-mini-instruct.jinja; commit
      1eeb523c3e0c7ffbd59469f5463dcbdecba3535e of a fork), copies of those models'
      tokenizer_config.json chat_template;
  olmo2    allenai/OLMo-2 Instruct's chat_template (1124 and 0425 models), and
  smollm2  HuggingFaceTB/SmolLM2-*-Instruct's chat_template, both as quoted verbatim
           (JSON-decoded) by several public repositories.
Each family's bos_token and eos_token are those of its tokenizer_config.json (Qwen2.5
has no bos_token: it is undefined in the template).

Besides each family's conversations (single turn, multi-turn, with and without a system
prompt where the template takes one, a final assistant turn as fine-tuning data has it,
add_generation_prompt both ways, text with spaces and non-ASCII characters), `features`
are small templates of this script's own, rendered the same way, that pin the Jinja
semantics the renderer implements (whitespace control, trim_blocks and lstrip_blocks,
loop variables, scoping, namespace, slices, filters, tests, operators, escapes).

A case's expected result is the text apply_chat_template(..., tokenize=False) returns,
or, where the template raises (Gemma 2 refuses a system turn), the exception's message.
The tokenizer is an empty one (no special tokens of its own), so the template sees only
messages, add_generation_prompt, tools = None, documents = None and the bos_token and
eos_token passed in. strftime_now() (Llama 3.2 prints today's date) is fixed at NOW by
replacing transformers' datetime; the C test renders with the same time in UTC.

Usage: python3 tools/make_chat_template_fixtures.py [--out tests/fixtures/chat_templates]
"""
import argparse
import calendar
import datetime
import json
import os

import jinja2
import tokenizers
import transformers
import transformers.utils.chat_template_utils as chat_template_utils
from transformers import PreTrainedTokenizerFast

NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)  # naive, read as UTC by the C test

FAMILIES = {
    "llama3.1": dict(bos="<|begin_of_text|>", eos="<|eot_id|>", system=True),
    "llama3.2": dict(bos="<|begin_of_text|>", eos="<|eot_id|>", system=True),
    "qwen2.5": dict(bos=None, eos="<|im_end|>", system=True),
    "gemma2": dict(bos="<bos>", eos="<eos>", system=False),
    "phi3.5": dict(bos="<s>", eos="<|endoftext|>", system=True),
    "olmo2": dict(bos="<|endoftext|>", eos="<|endoftext|>", system=True),
    "smollm2": dict(bos="<|im_start|>", eos="<|im_end|>", system=True),
}


def msg(role, content):
    return {"role": role, "content": content}


SYSTEM = msg("system", "You are a terse assistant. Answer in one line.")
U1 = msg("user", "What is the capital of France?")
A1 = msg("assistant", "Paris.")
U2 = msg("user", "And of Japan?")
A2 = msg("assistant", "Tokyo.")
# leading/trailing spaces, a tab, U+3000 and U+00A0 (Python's strip() removes them), non-ASCII text
U_SPACES = msg("user", "  \tGr\u00fc\u00dfe, \u4e16\u754c \U0001F44B \u2014 what's 2+2?\u3000\u00a0\n")
A_SPACES = msg("assistant", "\n 4 \n\n")

CONVERSATIONS = {
    "single": [U1],
    "answered": [U1, A1],
    "multi": [U1, A1, U2],
    "multi_answered": [U1, A1, U2, A2],
    "spaces": [U_SPACES, A_SPACES, U2],
    "system_single": [SYSTEM, U1],
    "system_multi": [SYSTEM, U1, A1, U2, A2],
    "empty_system": [msg("system", ""), U1, A1],
}

# Small templates of our own, each rendered over FEATURE_MESSAGES.
FEATURE_MESSAGES = [SYSTEM, U1, A1, U_SPACES]
FEATURES = {
    "whitespace_control": "a  {{- ' b ' -}}  c\n  {%- if true %} d {% endif -%}\n  e {#- note -#} f\n",
    "trim_lstrip_blocks": "<ul>\n    {% for m in messages %}\n    <li>{{ m.role }}</li>\n    {% endfor %}\n</ul>\n"
    "  {# a comment line #}\nafter\n{%+ if true %}kept indent{% endif %}\n"
    "{% if true +%}\nno trim{% endif %}\n\n",
    "crlf_and_final_newline": "one\r\n{% if true %}\r\ntwo\r\n{% endif %}\rthree\n",
    "loop_variables": "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ loop.index0 }},"
    "{{ loop.revindex }},{{ loop.revindex0 }},{{ loop.first }},{{ loop.last }},"
    "{{ loop.previtem.role if loop.previtem is defined else '-' }},{{ loop.nextitem.role if loop.nextitem is defined else '-' }};"
    "{% endfor %}",
    "loop_else_filter_break": "{% for m in messages if m.role != 'system' %}{{ m.role }}{% if loop.index == 2 %}"
    "{% break %}{% endif %}{% endfor %}|{% for m in messages if m.role == 'tool' %}x{% else %}none{% endfor %}|"
    "{% for i in range(6) %}{% if i is odd %}{% continue %}{% endif %}{{ i }}{% endfor %}|"
    "{% for i in range(10, 0, -3) %}{{ i }},{% endfor %}",
    "scoping_and_namespace": "{% set x = 'outer' %}{% for m in messages %}{% set x = m.role %}{% endfor %}{{ x }}|"
    "{% set ns = namespace(n=0, last='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{% set ns.last = m.role %}{% endfor %}{{ ns.n }} {{ ns.last }}|"
    "{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}|{% set a, b = 'pq' %}{{ b }}{{ a }}|"
    "{% set captured %}  captured {{ messages | length }}  {% endset %}[{{ captured }}]",
    "slices_and_items": "{{ messages[1:] | length }} {{ messages[-1].role }} {{ messages[1:3][0]['role'] }} "
    "{{ (messages | first).role }} {{ (messages | last).role }} {{ 'abcdef'[1:5:2] }} {{ 'abcdef'[::-1] }} "
    "{{ 'h\u00e9llo'[1] }}{{ 'h\u00e9llo'[-4:] }} {{ [1, 2, 3, 4][::2] }} {{ (1, 2)[1] }} "
    "{{ messages[9] is defined }} {{ messages[0].nope is undefined }}",
    "filters": "[{{ messages[3].content | trim }}] [{{ '  x  ' | trim }}] [{{ 'xxhixx' | trim('x') }}] "
    "{{ messages[3].content | length }} {{ 'MiXed' | upper }} {{ 'MiXed' | lower }} "
    "{{ missing | default('dflt') }} {{ '' | default('empty', true) }} {{ '' | d('kept') }}| "
    "{{ ['a', 'b', 'c'] | join('-') }} {{ [1, 2] | join }} {{ 'a.b.c' | replace('.', '::') }} "
    "{{ 'aaa' | replace('a', 'b', 2) }} {{ 42 | string ~ '!' }} {{ 'abc' | list }} {{ messages | count }}",
    "tests": "{{ messages is defined }} {{ nothing is defined }} {{ none is none }} {{ 'x' is string }} "
    "{{ 3 is number }} {{ 3 is integer }} {{ true is boolean }} {{ true is true }} {{ false is false }} "
    "{{ messages[0] is mapping }} {{ 'x' is iterable }} {{ messages is sequence }} {{ 7 is odd }} "
    "{{ 7 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is eq 'a' }} "
    "{{ 'a' is ne('a') }} {{ messages[0] is not none }} {{ raise_exception is callable }}",
    "operators": "{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7 // 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} "
    "{{ 'ab' ~ 1 ~ none ~ true }} {{ 'ab' + 'cd' }} {{ [1] + [2] }} {{ '-' * 3 }} "
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 'a' < 'b' }} {{ 2 >= 2 }} {{ 1 == true }} {{ 'x' != 'y' }} "
    "{{ 'b' in 'abc' }} {{ 'role' in messages[0] }} {{ 4 not in [1, 2] }} "
    "{{ none or 'fallback' }} {{ 'first' and 'second' }} {{ not messages }} {{ 'yes' if messages else 'no' }} "
    "{{ 'x' if false }}|{{ -(3) }} {{ +4 }} {{ (1, 'a') }} {{ [none, true, 'it\\'s'] }} {{ {'k': [1, 'v']} }}",
    "strings": "{{ 'tab\\there' }}|{{ \"dq 'sq'\" }}|{{ 'nl\\nx' }}|{{ '\\x41\\u00e9\\U0001F600\\101' }}|"
    "{{ 'a' 'b' \"c\" }}|{{ '\\d\\\\' }}|{{ '  pad  '.strip() }}|{{ 'xxa'.lstrip('x') }}|"
    "{{ 'a\\n'.rstrip() }}|{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}|"
    "{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ messages[0].get('role') }} {{ messages[0].get('x', 'dflt') }}",
    "generation_and_set": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
    "[{{ m.content }}]{% endgeneration %}{% else %}{{ m.role[0] }}{% endif %}{% endfor %}"
    "{% set t = messages[0]['content'] | trim %}{{ t[:3] }}",
}


def render(template, messages, bos, eos, add_generation_prompt, date_string=None):
    tok = PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(tokenizers.models.BPE()))
    assert tok.special_tokens_map == {}, tok.special_tokens_map
    tok.chat_template = template
    kwargs = {}
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    if date_string is not None:
        kwargs["date_string"] = date_string
    try:
        return "output", tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )
    except jinja2.exceptions.TemplateError as e:
        return "error", str(e)


class FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "chat_templates"))
    args = ap.parse_args()
    chat_template_utils.datetime = FixedDatetime  # strftime_now() reads it when called

    cases = []

    def add(template_key, name, messages, agp, result, date_string=None, source=None):
        case = {"template": template_key, "name": name, "messages": messages, "add_generation_prompt": agp}
        if source is not None:
            case["source"] = source
        if date_string is not None:
            case["date_string"] = date_string
        case[result[0]] = result[1]
        cases.append(case)

    templates = {}
    for family, fam in FAMILIES.items():
        path = os.path.join(args.out, family + ".jinja")
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
        templates[family] = {"file": family + ".jinja", "bos_token": fam["bos"], "eos_token": fam["eos"]}
        for name, conv in CONVERSATIONS.items():
            for agp in (False, True):
                add(family, name, conv, agp, render(source, conv, fam["bos"], fam["eos"], agp))
        if family == "llama3.2":  # the caller's date instead of strftime_now
            add(family, "date_string", [SYSTEM, U1], True,
                render(source, [SYSTEM, U1], fam["bos"], fam["eos"], True, "01 Jan 2030"), date_string="01 Jan 2030")
        if family == "gemma2":  # roles out of order
            add(family, "not_alternating", [U1, U2], False, render(source, [U1, U2], fam["bos"], fam["eos"], False))

    templates["features"] = {"file": None, "bos_token": "<s>", "eos_token": "</s>"}
    for name, source in FEATURES.items():
        for agp in (False, True):
            add("features", name, FEATURE_MESSAGES, agp, render(source, FEATURE_MESSAGES, "<s>", "</s>", agp), source=source)

    for case in cases:
        assert "error" not in case or case["template"] == "gemma2", case  # only Gemma 2 refuses cases
    doc = {
        "made_by": "tools/make_chat_template_fixtures.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "now": calendar.timegm(NOW.timetuple()),
        "now_utc": NOW.isoformat(sep=" "),
        "templates": templates,
        "cases": cases,
    }
    out = os.path.join(args.out, "expected.json")
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in c for c in cases)
    print(f"{out}: {len(cases)} cases ({n_err} raise), transformers {transformers.__version__}, jinja2 {jinja2.__version__}")


if __name__ == "__main__":
    main()
