"""The models repoctx calls, each behind one interface, below retrieval and the copilot that use them.

* ``repoctx.providers.embedding``: text to vectors (the MiniLM shipped in the package, or a remote one
  through LangChain), the text embedded for a unit, and the token count every budget uses.
* ``repoctx.providers.llm``: the language model named by ``REPOCTX_LLM``, as a Strands ``Model``.

Light on import: nothing here loads Strands, LangChain or a provider SDK until a model is built.
"""
