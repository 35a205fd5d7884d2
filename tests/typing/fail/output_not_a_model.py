# infer(output=...) takes a pydantic model class, not any type.
# expect-mypy: Value of type variable "M" of "infer" cannot be "dict[Any, Any]"
# expect-pyright: No overloads for "infer" match the provided arguments
from op import Op, infer


def program() -> Op[None]:
    answer = yield from infer("plan it", output=dict)
    print(answer)
