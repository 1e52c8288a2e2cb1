"""`stride config show [CONFIG] [--set k=v ...] [--markdown]`: every key, its value, default, choices and doc.

With CONFIG (and overrides) the values are that config's, resolved and checked as `stride train` would;
keys whose value differs from the default are marked. `--markdown` prints the reference page
(docs/config.md) instead.
"""

from __future__ import annotations

import argparse


def register(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="every key: value, default, type or choices, and what it does")
    show.add_argument("config", nargs="?", default=None, help="TOML run config (default: the defaults alone)")
    show.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="override a config value, as for `stride train` (repeatable)")
    show.add_argument("--markdown", action="store_true", help="print the reference page (docs/config.md)")
    show.add_argument("--section", default=None, help="only this section, e.g. train")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stride.config import ConfigError, config_to_dict, load_config
    from stride.config.errors import suggest
    from stride.config.fields import all_fields, section_classes
    from stride.config.reference import default_text, reference_markdown

    if args.markdown:
        print(reference_markdown(), end="")
        return 0
    sections = list(section_classes())
    if args.section is not None and args.section not in sections:
        raise ConfigError(f"--section `{args.section}` is not a section{suggest(args.section, sections)}; "
                          f"sections are {', '.join(sections)}")
    values = config_to_dict(load_config(args.config, args.overrides))
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from stride.shown_text import literal

    table = Table(title=f"stride config: {args.config or 'defaults'}", expand=True)
    for name, kw in (("key", {"no_wrap": True}), ("value", {}), ("default", {}), ("type", {"ratio": 1}),
                     ("what it does", {"ratio": 3})):
        table.add_column(name, **kw)
    for f in all_fields():
        if args.section is not None and f.section != args.section:
            continue
        value = values[f.section][f.name]
        style = "bold yellow" if value != f.default else ""  # differs from the default
        # a value may come from a config file: shown as written, its control characters escaped (audit 14, M2)
        table.add_row(Text(f.key), literal(default_text(value), style), Text(default_text(f.default)),
                      Text(f.describe()), Text(f.doc))
    console = Console()
    if not console.is_terminal:  # a pipe or a file: a fixed, readable width and no colour codes
        console = Console(width=200, no_color=True)
    console.print(table)
    return 0
