"""A free-text brief becomes a domain pack drafted by a model, repaired until every engine stage proves it.

The model (any OpenAI-compatible chat-completions server) writes the whole pack as one JSON
object; everything after it is the offline engine with its proofs. `config` says which server,
model, cache and prices; `cache` keeps every request and its reply by the request's hash, so a
rebuild replays the conversation at no cost; `prompt` words the draft and repair requests;
`checks` holds the extra validation a model's pack gets; `loop` drafts, validates, proves and
repairs; `record` is what a drafted world keeps of its conversation (drafting.json, world.json).
"""
