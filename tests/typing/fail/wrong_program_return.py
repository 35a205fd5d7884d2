# A program declared to return str that returns a Response must not type-check.
# expect-mypy: Incompatible return value type (got "Response", expected "str")
# expect-pyright: "Response" is not assignable to "str"
from op import Op, infer


def program() -> Op[str]:
    reply = yield from infer("hello")
    return reply
