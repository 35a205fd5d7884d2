# A program that uses an effect's result as the wrong type must not type-check.
# expect-mypy: Incompatible types in assignment
# expect-pyright: is not assignable to declared type "int"
from op import Op, infer


def program() -> Op[None]:
    reply: int = yield from infer("hello")
    print(reply)
