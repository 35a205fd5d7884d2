# run() keeps the program's result type: using it as another type must not type-check.
# expect-mypy: Incompatible types in assignment
# expect-pyright: is not assignable to declared type "int"
from interpreters import MemoryJournal, ScriptedModel, run
from op import Op, infer


def program() -> Op[str]:
    reply = yield from infer("hello")
    return reply.text


count: int = run(program, model=ScriptedModel(["hi"]), db=MemoryJournal()).value
