from langchain_core.language_models.fake import FakeListLLM
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough

from repoctx.retrieve.langchain import RepoctxRetriever
from tests.conftest import open_index

FILES = {
    "auth/login.py": "def authenticate_user(username, password):\n    \"\"\"Check a password against the stored hash.\"\"\"\n    return verify_hash(password)\n\n"
                     "def verify_hash(pw):\n    return True\n",
    "billing/invoice.py": "def render_invoice(order):\n    return str(order)\n",
}


def test_retriever_documents_carry_citations(make_repo, tmp_path):
    ix = open_index(make_repo(FILES), tmp_path / "idx")
    ix.update()
    docs = RepoctxRetriever(index=ix, k=3).invoke("where is the password checked when a user authenticates?")
    assert docs[0].metadata["symbol"] == "authenticate_user"
    assert docs[0].metadata["path"] == "auth/login.py" and docs[0].metadata["lines"] == [1, 3]
    assert docs[0].metadata["citation"] == "auth/login.py:1-3 :: authenticate_user"
    assert "def authenticate_user" in docs[0].page_content and docs[0].metadata["score"] > 0


def test_retriever_in_an_lcel_chain(make_repo, tmp_path):
    ix = open_index(make_repo(FILES), tmp_path / "idx")
    ix.update()
    seen = {}

    def fmt(docs):
        return "\n\n".join(f"# {d.metadata['citation']}\n{d.page_content}" for d in docs)

    def capture(prompt_value):
        seen["prompt"] = prompt_value.to_string()
        return prompt_value

    prompt = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    chain = ({"context": RepoctxRetriever(index=ix, k=2) | RunnableLambda(fmt), "question": RunnablePassthrough()}
             | prompt | RunnableLambda(capture) | FakeListLLM(responses=["see authenticate_user"]) | StrOutputParser())
    assert chain.invoke("render an invoice") == "see authenticate_user"
    assert "# billing/invoice.py:1-2 :: render_invoice" in seen["prompt"]
    assert "Question: render an invoice" in seen["prompt"]
