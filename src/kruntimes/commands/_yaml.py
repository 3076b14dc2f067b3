"""Safe YAML for the files the commands read, total on integers of any length.

PyYAML turns an integer scalar into an ``int`` with ``int()``, which raises
``ValueError`` past Python's digit limit (4,300): one such number in a file
would end a command with a traceback. :class:`SafeLoader` keeps it as an
``OverlongNumber`` instead, the value ``pure.readers.json.loads`` gives for the
same number in JSON, which no reader accepts as a number: the reader names the
field holding it.
"""

from __future__ import annotations

import yaml

from kruntimes.pure.readers.json import OverlongNumber


def _bounded_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | OverlongNumber:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:  # the resolver matched an integer: only its length can fail
        return OverlongNumber(len(str(node.value).lstrip("+-")))


class SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with integers past Python's digit limit kept as ``OverlongNumber``."""


SafeLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)
