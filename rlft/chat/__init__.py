"""Chat: how a conversation becomes a prompt, for training, evaluation and `rlft chat` alike.

  templates  the chat-template helpers every stage shares: the end-of-turn token and stop ids, wrapping plain
             prompts as chat (data.as_chat), the note for a plain prompt on a chat model
  session    `rlft chat`: talk to a model or a run in the terminal, or get one answer for a script

Light at import: neither module imports torch or transformers at module level.
"""
