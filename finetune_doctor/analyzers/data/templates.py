"""LLaMA-Factory chat templates, as data, and how a conversation is cut into the pieces LF tokenizes.

LLaMA-Factory (``src/llamafactory/data/template.py``, checked against the 0.9.5 wheel and the snapshot named in
LF_FACTS.md) builds every message from *slots*: plain strings (with ``{{content}}`` substituted), ``{"token": X}``
(one id, looked up by name), ``{"bos_token"}`` / ``{"eos_token"}`` (the tokenizer's BOS/EOS id when it has one).
``Template._convert_elements_to_ids`` encodes **each string slot separately** with
``tokenizer.encode(slot, add_special_tokens=False)``; tokens never merge across slot boundaries. So the exact
token count of a message is the sum over its slots, and this module reproduces the slot lists exactly.

What is reproduced (template.py line numbers of the 0.9.5 wheel):

* ``Template._encode`` (L130-168): turn 0 gets ``format_prefix`` then ``format_system(system + tool_text)`` when a
  system prompt or tools exist; ``system`` falls back to ``default_system``. User/assistant/observation/function
  messages use their formatters; ``format_observation`` defaults to ``format_user``; ``format_function`` defaults to
  the assistant slots with the ``default`` tool format (``register_template``, L533-560).
* ``Llama2Template._encode`` (L323-355): the system text is fused into the first user message instead.
* ``ReasoningTemplate`` (L396-463): empty ``<think>\\n\\n</think>\\n\\n`` added to turns without thought words;
  ``enable_thinking: false`` strips thoughts and puts the empty thought in the prompt (not trained).
* ``get_template_and_fix_tokenizer`` (L637-670): ``tool_format`` and ``default_system`` overrides.
* ``Template.fix_special_tokens`` (L186-215): ``replace_eos`` makes ``stop_words[0]`` the EOS; the remaining stop words
  are added as special tokens (this changes how text containing them is split). Applied in analyzers/data/tokenizer.py.

``baichuan2`` (``<reserved_106>{{content}}<reserved_107>``, efficient EOS) is no longer registered in LF 0.9.5;
it is kept here from older releases (LF ``data/template.py`` of v0.8.x) because configs still name it, and
`Template.removed_upstream` says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

# Slot markers. A slot is a str (may hold {{content}} / {{idx}}), or one of these tuples.
BOS = ("bos",)            # {"bos_token"}: tokenizer.bos_token_id when not None, else nothing
EOS = ("eos",)            # {"eos_token"}
NOTHING = ("set",)        # a set slot naming neither token (phi_small's {"<|endoftext|>"}): LF emits nothing


def tok(name: str) -> tuple[str, str]:
    """{"token": name}: one id, ``convert_tokens_to_ids(name)`` (the unk id when absent: still one token)."""
    return ("token", name)


Slot = Any
CONTENT = "{{content}}"
THOUGHT_DEFAULT = ("<think>\n", "\n</think>\n\n")
TOOL_CALL_DEFAULT = ("<tool_call>", "</tool_call>")


@dataclass(frozen=True)
class Template:
    """One chat template: slot lists per role plus EOS behaviour.

    `kind` is ``plain`` | ``llama2`` (system fused into the first user turn) | ``reasoning`` (thought words).
    `efficient_eos` templates end assistant turns without EOS; LF appends one EOS after the whole sequence
    (supervised) or after each response (pairwise), and labels the EOS that opens each later turn.
    """

    name: str
    user: tuple[Slot, ...] = (CONTENT,)
    assistant: tuple[Slot, ...] | None = None
    system: tuple[Slot, ...] | None = None
    function: tuple[Slot, ...] | None = None
    observation: tuple[Slot, ...] | None = None
    prefix: tuple[Slot, ...] = ()
    tool_format: str = "default"
    function_tool_format: str | None = None
    default_system: str = ""
    stop_words: tuple[str, ...] = ()
    thought_words: tuple[str, str] = THOUGHT_DEFAULT
    tool_call_words: tuple[str, str] = TOOL_CALL_DEFAULT
    efficient_eos: bool = False
    replace_eos: bool = False
    kind: str = "plain"
    enable_thinking: bool | None = True
    preserve_thinking: bool = False
    removed_upstream: bool = False
    multimodal: bool = False

    # resolved views (register_template's defaults)
    @property
    def assistant_slots(self) -> tuple[Slot, ...]:
        if self.assistant is not None:
            return self.assistant
        return (CONTENT,) if self.efficient_eos else (CONTENT, EOS)

    @property
    def system_slots(self) -> tuple[Slot, ...]:
        return self.system if self.system is not None else (CONTENT,)

    @property
    def observation_slots(self) -> tuple[Slot, ...]:
        if self.observation is not None:
            return self.observation
        return self.user

    @property
    def function_slots(self) -> tuple[Slot, ...]:
        if self.function is not None:
            return self.function
        return self.assistant_slots

    @property
    def function_format(self) -> str:
        return self.function_tool_format or ("default" if self.function is None else self.tool_format)


TEMPLATES: dict[str, Template] = {}


def _reg(name: str, **kw: Any) -> None:
    TEMPLATES[name] = Template(name=name, **kw)


_CHATML_USER = ("<|im_start|>user\n{{content}}<|im_end|>\n<|im_start|>assistant\n",)
_CHATML_ASSISTANT = ("{{content}}<|im_end|>\n",)
_CHATML_SYSTEM = ("<|im_start|>system\n{{content}}<|im_end|>\n",)
_QWEN_OBSERVATION = ("<|im_start|>user\n<tool_response>\n{{content}}\n</tool_response><|im_end|>\n"
                     "<|im_start|>assistant\n",)
_GEMMA_USER = ("<start_of_turn>user\n{{content}}<end_of_turn>\n<start_of_turn>model\n",)
_GEMMA_OBS = ("<start_of_turn>tool\n{{content}}<end_of_turn>\n<start_of_turn>model\n",)
_LLAMA3_USER = ("<|start_header_id|>user<|end_header_id|>\n\n{{content}}<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n",)

# --- the registry: strings are LLaMA-Factory's (template.py, 0.9.5 wheel) -------------------------------------------
_reg("default", user=("Human: {{content}}", EOS, "\nAssistant:"), assistant=("{{content}}", EOS, "\n"),
     system=("System: {{content}}", EOS, "\n"))
_reg("empty", assistant=("{{content}}",))
_reg("alpaca", user=("### Instruction:\n{{content}}\n\n### Response:\n",), assistant=("{{content}}", EOS, "\n\n"),
     default_system="Below is an instruction that describes a task. Write a response that appropriately completes "
                    "the request.\n\n")
_reg("vicuna", user=("USER: {{content}} ASSISTANT:",),
     default_system="A chat between a curious user and an artificial intelligence assistant. The assistant gives "
                    "helpful, detailed, and polite answers to the user's questions.")
_reg("llama2", user=(BOS, "[INST] {{content}} [/INST]"), system=("<<SYS>>\n{{content}}\n<</SYS>>\n\n",),
     kind="llama2")
_reg("llama2_zh", user=(BOS, "[INST] {{content}} [/INST]"), system=("<<SYS>>\n{{content}}\n<</SYS>>\n\n",),
     default_system="You are a helpful assistant. 你是一个乐于助人的助手。", kind="llama2")
_reg("llama3", user=_LLAMA3_USER, assistant=("{{content}}<|eot_id|>",),
     system=("<|start_header_id|>system<|end_header_id|>\n\n{{content}}<|eot_id|>",),
     function=("{{content}}<|eot_id|>",),
     observation=("<|start_header_id|>ipython<|end_header_id|>\n\n{{content}}<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n",),
     tool_format="llama3", prefix=(BOS,), stop_words=("<|eot_id|>", "<|eom_id|>"), replace_eos=True)
_reg("llama4", user=("<|header_start|>user<|header_end|>\n\n{{content}}<|eot|>"
                     "<|header_start|>assistant<|header_end|>\n\n",),
     assistant=("{{content}}<|eot|>",), system=("<|header_start|>system<|header_end|>\n\n{{content}}<|eot|>",),
     function=("{{content}}<|eot|>",),
     observation=("<|header_start|>ipython<|header_end|>\n\n{{content}}<|eot|>"
                  "<|header_start|>assistant<|header_end|>\n\n",),
     tool_format="llama3", prefix=(BOS,), stop_words=("<|eot|>", "<|eom|>"), replace_eos=True, multimodal=True)
_reg("mistral", user=("[INST] {{content}}[/INST]",), assistant=(" {{content}}", EOS),
     system=("{{content}}\n\n",), function=("[TOOL_CALLS] {{content}}", EOS),
     observation=('[TOOL_RESULTS] {"content": {{content}}}[/TOOL_RESULTS]',), tool_format="mistral",
     prefix=(BOS,), kind="llama2")
_reg("ministral", user=("[INST]{{content}}[/INST]",), system=("{{content}}\n\n",),
     function=("[TOOL_CALLS]{{content}}", EOS),
     observation=('[TOOL_RESULTS]{"content": {{content}}}[/TOOL_RESULTS]',), tool_format="mistral",
     prefix=(BOS,), kind="llama2")
_reg("mistral_small", user=("[INST]{{content}}[/INST]",), system=("[SYSTEM_PROMPT]{{content}}[/SYSTEM_PROMPT]",),
     function=("[TOOL_CALLS]{{content}}", EOS),
     observation=('[TOOL_RESULTS]{"content": {{content}}}[/TOOL_RESULTS]',), tool_format="mistral",
     prefix=(BOS,), multimodal=True)
_reg("chatml", user=_CHATML_USER, assistant=_CHATML_ASSISTANT, system=_CHATML_SYSTEM,
     observation=("<|im_start|>tool\n{{content}}<|im_end|>\n<|im_start|>assistant\n",),
     stop_words=("<|im_end|>", "<|im_start|>"), replace_eos=True)
_reg("qwen", user=_CHATML_USER, assistant=_CHATML_ASSISTANT, system=_CHATML_SYSTEM, function=_CHATML_ASSISTANT,
     observation=_QWEN_OBSERVATION, tool_format="qwen",
     default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
     stop_words=("<|im_end|>",), replace_eos=True)
_reg("qwen2_vl", user=_CHATML_USER, assistant=_CHATML_ASSISTANT, system=_CHATML_SYSTEM, function=_CHATML_ASSISTANT,
     observation=_QWEN_OBSERVATION, tool_format="qwen", default_system="You are a helpful assistant.",
     stop_words=("<|im_end|>",), replace_eos=True, multimodal=True)
_reg("qwen3", user=_CHATML_USER, assistant=_CHATML_ASSISTANT, system=_CHATML_SYSTEM, function=_CHATML_ASSISTANT,
     observation=_QWEN_OBSERVATION, tool_format="qwen", stop_words=("<|im_end|>",), replace_eos=True,
     kind="reasoning")
_reg("qwen3_nothink", user=_CHATML_USER, assistant=_CHATML_ASSISTANT, system=_CHATML_SYSTEM,
     function=_CHATML_ASSISTANT, observation=_QWEN_OBSERVATION, tool_format="qwen", stop_words=("<|im_end|>",),
     replace_eos=True)
_reg("yi", user=_CHATML_USER, assistant=_CHATML_ASSISTANT, system=_CHATML_SYSTEM, stop_words=("<|im_end|>",))
_reg("intern2", user=_CHATML_USER, assistant=_CHATML_ASSISTANT, system=_CHATML_SYSTEM, prefix=(BOS,),
     default_system=("You are an AI assistant whose name is InternLM (书生·浦语).\n"
                     "- InternLM (书生·浦语) is a conversational language model that is developed by Shanghai AI "
                     "Laboratory (上海人工智能实验室). It is designed to be helpful, honest, and harmless.\n"
                     "- InternLM (书生·浦语) can understand and communicate fluently in the language chosen by the "
                     "user such as English and 中文."),
     stop_words=("<|im_end|>",))
_reg("chatglm3", user=(tok("<|user|>"), "\n", "{{content}}", tok("<|assistant|>")), assistant=("\n", "{{content}}"),
     system=(tok("<|system|>"), "\n", "{{content}}"), function=("{{content}}",), function_tool_format="glm4",
     observation=(tok("<|observation|>"), "\n", "{{content}}", tok("<|assistant|>")), tool_format="glm4",
     prefix=(tok("[gMASK]"), tok("sop")), stop_words=("<|user|>", "<|observation|>"), efficient_eos=True)
_reg("glm4", user=("<|user|>\n{{content}}<|assistant|>",), assistant=("\n{{content}}",),
     system=("<|system|>\n{{content}}",), function=("{{content}}",), function_tool_format="glm4",
     observation=("<|observation|>\n{{content}}<|assistant|>",), tool_format="glm4", prefix=("[gMASK]<sop>",),
     stop_words=("<|user|>", "<|observation|>"), efficient_eos=True)
_reg("baichuan2", user=("<reserved_106>{{content}}<reserved_107>",), efficient_eos=True, removed_upstream=True)
_reg("gemma", user=_GEMMA_USER, assistant=("{{content}}<end_of_turn>\n",), system=("{{content}}\n\n",),
     observation=_GEMMA_OBS, prefix=(BOS,), stop_words=("<end_of_turn>",), replace_eos=True, kind="llama2")
_reg("gemma2", user=_GEMMA_USER, assistant=("{{content}}<end_of_turn>\n",), system=("{{content}}\n\n",),
     observation=_GEMMA_OBS, prefix=(BOS,), stop_words=("<eos>", "<end_of_turn>"), efficient_eos=True,
     kind="llama2")
_reg("gemma3", user=_GEMMA_USER, assistant=("{{content}}<end_of_turn>\n",), system=("{{content}}\n\n",),
     observation=_GEMMA_OBS, prefix=(BOS,), stop_words=("<end_of_turn>",), replace_eos=True, kind="llama2",
     multimodal=True)
_reg("deepseek", user=("User: {{content}}\n\nAssistant:",), system=("{{content}}\n\n",), prefix=(BOS,))
_reg("deepseek3", user=("<｜User｜>{{content}}<｜Assistant｜>",), prefix=(BOS,))
_reg("deepseekr1", user=("<｜User｜>{{content}}<｜Assistant｜>",), prefix=(BOS,), kind="reasoning")
_reg("phi", user=("<|user|>\n{{content}}<|end|>\n<|assistant|>\n",), assistant=("{{content}}<|end|>\n",),
     system=("<|system|>\n{{content}}<|end|>\n",), stop_words=("<|end|>",), replace_eos=True)
_reg("phi_small", user=("<|user|>\n{{content}}<|end|>\n<|assistant|>\n",), assistant=("{{content}}<|end|>\n",),
     system=("<|system|>\n{{content}}<|end|>\n",), prefix=(NOTHING,), stop_words=("<|end|>",), replace_eos=True)
_reg("phi4", user=("<|im_start|>user<|im_sep|>{{content}}<|im_end|><|im_start|>assistant<|im_sep|>",),
     assistant=("{{content}}<|im_end|>",), system=("<|im_start|>system<|im_sep|>{{content}}<|im_end|>",),
     stop_words=("<|im_end|>",), replace_eos=True)
_reg("zephyr", user=("<|user|>\n{{content}}", EOS, "<|assistant|>\n"), system=("<|system|>\n{{content}}", EOS),
     default_system="You are Zephyr, a helpful assistant.")
_reg("falcon", user=("User: {{content}}\nFalcon:",), assistant=("{{content}}\n",), efficient_eos=True)
_reg("cohere", user=("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{content}}<|END_OF_TURN_TOKEN|>"
                     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",),
     system=("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{content}}<|END_OF_TURN_TOKEN|>",), prefix=(BOS,))
_reg("olmo", user=("<|user|>\n{{content}}<|assistant|>\n",), prefix=(EOS,))
_reg("openchat", user=("GPT4 Correct User: {{content}}", EOS, "GPT4 Correct Assistant:"), prefix=(BOS,))


def get_template(name: str | None, *, tool_format: str | None = None, default_system: str | None = None,
                 enable_thinking: bool | None = True, preserve_thinking: bool = False) -> Template:
    """The template LF would use for ``template: name`` with the data-argument overrides applied.

    Raises KeyError for a name this module does not implement (the caller decides whether that is LF's own
    ``ValueError("Template X does not exist.")`` or just a template we lack).
    """
    return customize(TEMPLATES[name or "empty"], tool_format=tool_format, default_system=default_system,
                     enable_thinking=enable_thinking, preserve_thinking=preserve_thinking)


def customize(t: Template, *, tool_format: str | None = None, default_system: str | None = None,
              enable_thinking: bool | None = True, preserve_thinking: bool = False) -> Template:
    """Apply the data arguments that ``get_template_and_fix_tokenizer`` writes into the template."""
    if tool_format is not None:
        slots = (CONTENT,) if t.efficient_eos else (CONTENT, EOS)
        t = replace(t, function=slots, function_tool_format=tool_format, tool_format=tool_format)
    if default_system is not None:
        t = replace(t, default_system=default_system)
    if t.kind == "reasoning":
        t = replace(t, enable_thinking=enable_thinking, preserve_thinking=bool(preserve_thinking))
    return t


# --- tool formats (LF data/tool_utils.py) -----------------------------------------------------------------------------

_DEFAULT_TOOL_PROMPT = (
    "You have access to the following tools:\n{tool_text}"
    "Use the following format if using a tool:\n"
    "```\n"
    "Action: tool name (one of [{tool_names}])\n"
    "Action Input: the input to the tool, in a JSON format representing the kwargs "
    '(e.g. ```{{"input": "hello world", "num_beams": 5}}```)\n'
    "```\n"
)
_QWEN_TOOL_PROMPT = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tool_text}"
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, '
    '"arguments": <args-json-object>}}\n</tool_call>'
)
_GLM4_TOOL_PROMPT = (
    "你是一个名为 ChatGLM 的人工智能助手。你是基于智谱 AI 公司训练的语言模型 GLM-4 模型开发的，"
    "你的任务是针对用户的问题和要求提供适当的答复和支持。\n\n# 可用工具{tool_text}"
)
_LLAMA3_TOOL_PROMPT = (
    "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
    "You have access to the following functions. To call a function, please respond with JSON for a function call. "
    'Respond in the format {{"name": function name, "parameters": dictionary of argument name and its value}}. '
    "Do not use variables.\n\n{tool_text}"
)
TOOL_FORMATS = ("default", "qwen", "glm4", "llama3", "mistral")


def _as_function(tool: dict[str, Any]) -> dict[str, Any]:
    return tool.get("function", "") if tool.get("type") == "function" else tool


def _wrapped(tool: dict[str, Any]) -> dict[str, Any]:
    return tool if tool.get("type") == "function" else {"type": "function", "function": tool}


def format_tools(tools: list[dict[str, Any]], fmt: str) -> str:
    """The system-prompt text LF appends for `tools` (``ToolUtils.tool_formatter``); unknown formats use default."""
    if not tools:
        return ""
    if fmt == "qwen":
        return _QWEN_TOOL_PROMPT.format(tool_text="".join("\n" + json.dumps(_wrapped(t), ensure_ascii=False)
                                                          for t in tools))
    if fmt == "glm4":
        text = ""
        for t in tools:
            t = _as_function(t)
            text += "\n\n## {name}\n\n{body}\n在调用上述函数时，请使用 Json 格式表示调用的参数。".format(
                name=t["name"], body=json.dumps(t, indent=4, ensure_ascii=False))
        return _GLM4_TOOL_PROMPT.format(tool_text=text)
    if fmt == "llama3":
        from datetime import datetime

        text = "".join(json.dumps(_wrapped(t), indent=4, ensure_ascii=False) + "\n\n" for t in tools)
        return _LLAMA3_TOOL_PROMPT.format(date=datetime.now().strftime("%d %b %Y"), tool_text=text)
    if fmt == "mistral":
        return "[AVAILABLE_TOOLS] " + json.dumps([_wrapped(t) for t in tools], ensure_ascii=False) + \
            "[/AVAILABLE_TOOLS]"
    text, names = "", []
    for t in tools:
        t = _as_function(t)
        params = ""
        for pname, p in t["parameters"]["properties"].items():
            required = ", required" if pname in t["parameters"].get("required", []) else ""
            enum = ", should be one of [{}]".format(", ".join(p["enum"])) if p.get("enum", None) else ""
            items = ", where each item should be {}".format(p["items"].get("type", "")) if p.get("items", None) \
                else ""
            params += f"  - {pname} ({p.get('type', '')}{required}): {p.get('description', '')}{enum}{items}\n"
        text += f"> Tool Name: {t['name']}\nTool Description: {t.get('description', '')}\nTool Args:\n{params}\n"
        names.append(t["name"])
    return _DEFAULT_TOOL_PROMPT.format(tool_text=text, tool_names=", ".join(names))


def format_function_calls(calls: list[tuple[str, str]], fmt: str) -> str:
    """The assistant text LF writes for function calls (``ToolUtils.function_formatter``)."""
    if fmt == "qwen":
        return "\n".join("<tool_call>\n" + json.dumps({"name": n, "arguments": json.loads(a)}, ensure_ascii=False)
                         + "\n</tool_call>" for n, a in calls)
    if fmt == "glm4":
        if len(calls) > 1:
            raise ValueError("GLM-4 does not support parallel functions.")
        return f"{calls[0][0]}\n{calls[0][1]}"
    if fmt == "llama3":
        objs = [{"name": n, "parameters": json.loads(a)} for n, a in calls]
        return json.dumps(objs[0] if len(objs) == 1 else objs, ensure_ascii=False)
    if fmt == "mistral":
        return json.dumps([{"name": n, "arguments": json.loads(a)} for n, a in calls], ensure_ascii=False)
    return "\n".join(f"Action: {n}\nAction Input: {a}" for n, a in calls)


def render_function_message(content: str, t: Template, words: bool = True) -> str:
    """``FunctionFormatter.apply``: JSON tool calls (optionally with thought / tool-call words) → assistant text.

    `words` False mirrors ``Llama2Template._encode``, which passes no thought/tool-call words to the formatter.
    Raises ValueError for content that is not the JSON LF expects (LF raises RuntimeError and the run fails).
    """

    def parse(js: str) -> list[tuple[str, str]]:
        try:
            calls = json.loads(js)
        except json.JSONDecodeError:
            raise ValueError(f"function message is not JSON: {content[:60]!r}") from None
        if not isinstance(calls, list):
            calls = [calls]
        try:
            return [(c["name"], json.dumps(c["arguments"], ensure_ascii=False)) for c in calls]
        except (KeyError, TypeError):
            raise ValueError("function call lacks 'name'/'arguments'") from None

    fmt = t.function_format
    tc0, tc1 = t.tool_call_words if words else ("", "")
    m = re.search(re.escape(tc0) + "(.*?)" + re.escape(tc1), content, re.DOTALL) if tc0 and tc1 else None
    if m is None:
        th0, th1 = t.thought_words
        tm = re.search(re.escape(th0) + "(.*?)" + re.escape(th1), content, re.DOTALL) if words else None
        body = content.replace(tm.group(0), "") if tm else content
        text = format_function_calls(parse(body), fmt)
        return tm.group(0) + text if tm else text
    thought = content.replace(m.group(0), "")
    return thought + format_function_calls(parse(m.group(1)), fmt)


# --- conversation → slots ---------------------------------------------------------------------------------------------


def _apply(slots: Sequence[Slot], content: str, idx: str | None = None) -> list[Slot]:
    """``StringFormatter.apply``: substitute the first {{content}} (and {{idx}}) of each string slot."""
    out: list[Slot] = []
    for s in slots:
        if isinstance(s, str):
            s = s.replace(CONTENT, content, 1)
            if idx is not None:
                s = s.replace("{{idx}}", idx, 1)
        out.append(s)
    return out


def remove_thought(content: str, t: Template) -> str:
    """``Template.remove_thought``: drop every ``<think>...</think>`` block, then leading newlines."""
    pat = re.compile(re.escape(t.thought_words[0]) + "(.*?)" + re.escape(t.thought_words[1]), re.DOTALL)
    return re.sub(pat, "", content).lstrip("\n")


def _has_thought(content: str, t: Template) -> bool:
    return t.thought_words[0].strip() in content or t.thought_words[1].strip() in content


def message_slots(t: Template, messages: Sequence[dict[str, str]], system: str | None,
                  tools: str | None) -> list[list[Slot]]:
    """Slots of every message, as ``Template._encode`` / ``Llama2Template._encode`` build them.

    `messages` alternate user/observation and assistant/function (roles: user, assistant, observation,
    function). `tools` is the JSON text of the tool list. Raises ValueError for malformed tools or function
    JSON (LF fails on those too).
    """
    system = system or t.default_system
    tool_text = ""
    if tools:
        try:
            tool_list = json.loads(tools)
        except json.JSONDecodeError:
            raise ValueError(f"tools column is not JSON: {tools[:60]!r}") from None
        tool_text = format_tools(tool_list, t.tool_format) if len(tool_list) != 0 else ""
    out: list[list[Slot]] = []
    for i, m in enumerate(messages):
        role, content = m["role"], m["content"]
        slots: list[Slot] = []
        sys_fused = ""
        if i == 0:
            slots += list(t.prefix)
            if system or tools:
                sys_slots = _apply(t.system_slots, system + tool_text)
                if t.kind == "llama2":
                    sys_fused = sys_slots[0]  # LF takes the first system slot as text
                else:
                    slots += sys_slots
        if role == "user":
            slots += _apply(t.user, sys_fused + content if t.kind == "llama2" else content, idx=str(i // 2))
        elif role == "assistant":
            slots += _apply(t.assistant_slots, content)
        elif role == "observation":  # Llama2Template fuses the system text into user messages only
            slots += _apply(t.observation_slots, content)
        elif role == "function":
            slots += _apply(t.function_slots, render_function_message(content, t, words=t.kind != "llama2"))
        else:
            raise ValueError(f"unexpected role {role!r}")
        out.append(slots)
    return out


@dataclass
class EncodePlan:
    """How one sample becomes token counts: the slot lists per message plus thought-word adjustments.

    `extra_prompt[i]` / `extra_response[i]` count empty-thought insertions (in units of the empty thought's
    token count) for the pair i (reasoning templates).
    """

    messages: list[list[Slot]]
    extra_prompt: dict[int, int] = field(default_factory=dict)
    extra_response: dict[int, int] = field(default_factory=dict)


def plan_multiturn(t: Template, messages: list[dict[str, str]], system: str | None, tools: str | None,
                   discarding_history_cot: bool = False) -> EncodePlan:
    """``encode_multiturn`` (supervised): one slot list per message; pairs are (2i, 2i+1)."""
    if t.kind == "reasoning":
        messages = [dict(m) for m in messages]
        if t.enable_thinking is False:
            for i in range(1, len(messages), 2):
                messages[i]["content"] = remove_thought(messages[i]["content"], t)
        if discarding_history_cot:
            for i in range(1, len(messages) - 2, 2):
                messages[i]["content"] = remove_thought(messages[i]["content"], t)
    plan = EncodePlan(message_slots(t, messages, system, tools))
    if t.kind == "reasoning":
        turns = [len(messages) - 2] if discarding_history_cot else range(0, len(messages), 2)
        for i in turns:
            if not _has_thought(messages[i + 1]["content"], t):
                if not t.enable_thinking:
                    plan.extra_prompt[i // 2] = 1
                else:
                    plan.extra_response[i // 2] = 1
    return plan


def plan_oneturn(t: Template, messages: list[dict[str, str]], system: str | None, tools: str | None) -> EncodePlan:
    """``encode_oneturn`` (pairwise, unsupervised, feedback): prompt = all but the last message."""
    if t.kind == "reasoning":
        messages = [dict(m) for m in messages]
        if not t.preserve_thinking:
            for i in range(1, len(messages) - 2, 2):
                messages[i]["content"] = remove_thought(messages[i]["content"], t)
        if t.enable_thinking is False:
            messages[-1]["content"] = remove_thought(messages[-1]["content"], t)
    plan = EncodePlan(message_slots(t, messages, system, tools))
    if t.kind == "reasoning" and not _has_thought(messages[-1]["content"], t):
        if not t.enable_thinking:
            plan.extra_prompt[0] = 1
        else:
            plan.extra_response[0] = 1
    return plan


def empty_thought(t: Template) -> str:
    """``Template.add_thought()``: the text of an empty thought block."""
    return t.thought_words[0] + t.thought_words[1]


def eos_tail_slots(t: Template, eos_token: str | None) -> list[Slot] | None:
    """The slots that follow the end-of-turn token in an assistant message, or None when there is none.

    A response truncated by more than the token count of this tail has lost its end-of-turn token: the model
    learns from this sample never to stop. The end-of-turn marker is the template's EOS slot, or inside a
    string slot the EOS token text / the first stop word (``<|im_end|>`` for ChatML).
    """
    slots = list(t.assistant_slots)
    try:
        ci = next(i for i, s in enumerate(slots) if isinstance(s, str) and CONTENT in s)
    except StopIteration:
        return None
    markers = [m for m in ([eos_token] if eos_token else []) + list(t.stop_words) if m]
    after: list[Slot] = [slots[ci].split(CONTENT, 1)[1]] + slots[ci + 1:]
    for j in range(len(after) - 1, -1, -1):
        s = after[j]
        if s == EOS:
            return [x for x in after[j + 1:] if x != ""]
        if isinstance(s, str):
            hits = [(s.rfind(m), m) for m in markers if m in s]
            if hits:
                pos, m = max(hits)
                rest = s[pos + len(m):]
                return [x for x in [rest] + after[j + 1:] if x != ""]
    return None


# Every template name LLaMA-Factory 0.9.5 registers (``register_template(name=...)`` in data/template.py of the
# PyPI wheel). A name outside this set makes LF raise ``ValueError("Template X does not exist.")`` unless the
# installed LF is newer and added it.
LF_TEMPLATE_NAMES = frozenset("""
aeva alpaca bailing bailing_v2 breeze chatglm3 chatml chatml_de cohere cpm4 dbrx deepseek deepseek3 deepseekcoder
deepseekr1 default dots_ocr empty ernie ernie_nothink ernie_vl exaone falcon falcon_h1 fewshot gemma gemma2 gemma3
gemma3n gemma4 gemma4n glm4 glm4_5v glm4_7 glm4_moe glm4v glm_ocr glmz1 gpt_oss granite3 granite3_vision granite4
hunyuan hunyuan_small hy3 index intern2 intern_s1 intern_vl keye_vl kimi_vl lfm2 lfm2_vl llama2 llama2_zh llama3
llama4 llava llava_next llava_next_llama3 llava_next_mistral llava_next_qwen llava_next_video llava_next_video_mistral
llava_next_video_yi llava_next_yi mimo mimo_v2 mimo_vl minicpm_o minicpm_v minicpm_v_4_6 minimax1 minimax2 ministral
ministral3 mistral mistral_small mllama moonlight olmo openchat openchat-3.6 opencoder paligemma paligemma_chat phi
phi4 phi4_mini phi_small pixtral qwen qwen2_audio qwen2_omni qwen2_vl qwen3 qwen3_5 qwen3_5_nothink qwen3_6
qwen3_nothink qwen3_omni qwen3_omni_nothink qwen3_vl qwen3_vl_nothink sailor seed_coder seed_oss smollm smollm2 solar
starchat telechat2 vicuna video_llava xuanyuan yi yi_vl youtu youtu_vl yuan zephyr
""".split())


def parse_chat_template(render: Any, prefix: str) -> Template:
    """The template LF builds from a tokenizer's Jinja chat template when the config sets no ``template``
    (``parse_template``, template.py:563-618): render probe conversations whose contents are ``{{content}}``
    and cut the text into user/assistant/system slots.

    `render(messages, add_generation_prompt) -> str` renders the chat template; `prefix` is what the tokenizer
    adds around an empty text (``decode(encode(""))``, e.g. a BOS). Raises whatever the renderer raises.
    """

    def find_diff(short: str, long: str) -> str:
        i = j = 0
        diff = ""
        while i < len(short) and j < len(long):
            if short[i] == long[j]:
                i += 1
            else:
                diff += long[j]
            j += 1
        return diff

    n = len(prefix)
    system_slot = render([{"role": "system", "content": CONTENT}], False)[n:]
    user_empty_sys = render([{"role": "system", "content": ""}, {"role": "user", "content": CONTENT}], True)[n:]
    user_slot = render([{"role": "user", "content": CONTENT}], True)[n:]
    assistant_slot = render([{"role": "user", "content": CONTENT}, {"role": "assistant", "content": CONTENT}],
                            False)[n + len(user_slot):]
    reasoning = "<think>" in assistant_slot
    assistant_slot = assistant_slot.replace("<think>", "").replace("</think>", "").lstrip("\n")
    if len(user_slot) > len(user_empty_sys):
        default_system = find_diff(user_empty_sys, user_slot)
        sole_system = system_slot.replace(CONTENT, default_system, 1)
        user_slot = user_slot[len(sole_system):]
    else:
        default_system = ""
    return Template(name="(tokenizer chat_template)", user=(user_slot,), assistant=(assistant_slot,),
                    system=(system_slot,), function=(assistant_slot,), function_tool_format="default",
                    observation=(user_slot,), prefix=(prefix,) if prefix else (), default_system=default_system,
                    kind="reasoning" if reasoning else "plain")
