"""The draft step, above the build: a free-text brief becomes a domain pack drafted by a model, repaired
until the pipeline proves it, and recorded in the drafts folder (worldfactory.drafts) for world_brief.

The model (any OpenAI-compatible chat-completions server) writes the whole pack as one JSON
object; everything after it is the offline engine with its proofs. `step` is the step itself
(`draft_brief`: reuse a proven draft, or draft, prove and record one); `config` says which server,
model, cache and prices; `cache` keeps every request and its reply by the request's hash, so a
redraft replays the conversation at no cost; `prompt` words the draft and repair requests;
`checks` holds the extra validation a model's pack gets; `loop` drafts, validates, proves and
repairs; `errors` is this layer's DraftError. Nothing below this layer imports it.
"""
