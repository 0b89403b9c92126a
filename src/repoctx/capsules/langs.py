"""Per-language node tables for tree-sitter capsule extraction (one table a language, no code)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LangSpec:
    functions: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()  # name a scope without being a capsule (Rust impl blocks)
    calls: dict[str, tuple[str, ...]] = field(default_factory=dict)  # node type -> fields naming the callee
    imports: tuple[str, ...] = ()
    comments: tuple[str, ...] = ("comment",)
    bases: tuple[str, ...] = ()  # child node types / fields listing base classes
    returns: tuple[str, ...] = ("return_type",)
    separator: str = "."
    js_like: bool = False


SPECS: dict[str, LangSpec] = {
    "python": LangSpec(
        functions=("function_definition",),
        classes=("class_definition",),
        calls={"call": ("function",)},
        imports=("import_statement", "import_from_statement"),
        bases=("superclasses",),
    ),
    "javascript": LangSpec(
        functions=(
            "function_declaration",
            "generator_function_declaration",
            "method_definition",
            "variable_declarator",
        ),
        classes=("class_declaration", "class"),
        calls={"call_expression": ("function",), "new_expression": ("constructor",)},
        imports=("import_statement",),
        bases=("class_heritage",),
        js_like=True,
    ),
    "typescript": LangSpec(
        functions=(
            "function_declaration",
            "generator_function_declaration",
            "method_definition",
            "variable_declarator",
            "method_signature",
            "function_signature",
        ),
        classes=(
            "class_declaration",
            "abstract_class_declaration",
            "interface_declaration",
            "class",
            "enum_declaration",
        ),
        calls={"call_expression": ("function",), "new_expression": ("constructor",)},
        imports=("import_statement",),
        bases=("class_heritage", "extends_type_clause"),
        js_like=True,
    ),
    "go": LangSpec(
        functions=("function_declaration", "method_declaration"),
        classes=("type_spec",),
        calls={"call_expression": ("function",)},
        imports=("import_spec",),
        returns=("result",),
    ),
    "java": LangSpec(
        functions=("method_declaration", "constructor_declaration"),
        classes=(
            "class_declaration",
            "interface_declaration",
            "enum_declaration",
            "record_declaration",
            "annotation_type_declaration",
        ),
        calls={"method_invocation": ("object", "name"), "object_creation_expression": ("type",)},
        imports=("import_declaration",),
        comments=("block_comment", "line_comment"),
        bases=("superclass", "super_interfaces"),
        returns=("type",),
    ),
    "rust": LangSpec(
        functions=("function_item", "function_signature_item"),
        classes=("struct_item", "enum_item", "trait_item", "union_item"),
        scopes=("impl_item",),
        calls={"call_expression": ("function",), "macro_invocation": ("macro",)},
        imports=("use_declaration",),
        comments=("line_comment", "block_comment"),
        bases=("trait_bounds",),
        separator="::",
    ),
    "c": LangSpec(
        functions=("function_definition",),
        classes=("struct_specifier", "union_specifier", "enum_specifier"),
        calls={"call_expression": ("function",)},
        imports=("preproc_include",),
        returns=("type",),
    ),
    "cpp": LangSpec(
        functions=("function_definition",),
        classes=("class_specifier", "struct_specifier", "union_specifier", "enum_specifier"),
        scopes=("namespace_definition",),
        calls={"call_expression": ("function",), "new_expression": ("type",)},
        imports=("preproc_include", "using_declaration"),
        bases=("base_class_clause",),
        returns=("type",),
        separator="::",
    ),
    "csharp": LangSpec(
        functions=(
            "method_declaration",
            "constructor_declaration",
            "local_function_statement",
            "destructor_declaration",
            "operator_declaration",
        ),
        classes=(
            "class_declaration",
            "interface_declaration",
            "struct_declaration",
            "record_declaration",
            "enum_declaration",
        ),
        scopes=("namespace_declaration", "file_scoped_namespace_declaration"),
        calls={"invocation_expression": ("function",), "object_creation_expression": ("type",)},
        imports=("using_directive",),
        bases=("base_list",),
        returns=("returns", "type"),
    ),
    "ruby": LangSpec(
        functions=("method", "singleton_method"),
        classes=("class", "module"),
        calls={"call": ("receiver", "method")},
        imports=(),
        bases=("superclass",),
        returns=(),
    ),
    "php": LangSpec(
        functions=("function_definition", "method_declaration"),
        classes=("class_declaration", "interface_declaration", "trait_declaration", "enum_declaration"),
        scopes=("namespace_definition",),
        calls={
            "function_call_expression": ("function",),
            "member_call_expression": ("object", "name"),
            "scoped_call_expression": ("scope", "name"),
            "object_creation_expression": (),
        },
        imports=("namespace_use_declaration",),
        bases=("base_clause", "class_interface_clause"),
        separator="\\",
    ),
}
SPECS["tsx"] = SPECS["typescript"]
