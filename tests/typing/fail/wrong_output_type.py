# A program that takes a typed answer as another type must not type-check.
# expect-mypy: Incompatible types in assignment (expression has type "Plan", variable has type "Response")
# expect-pyright: Type "Plan" is not assignable to declared type "Response"
from pydantic import BaseModel

from op import Op, Response, infer


class Plan(BaseModel):
    steps: list[str]


def program() -> Op[None]:
    reply: Response = yield from infer("plan it", output=Plan)
    print(reply)
