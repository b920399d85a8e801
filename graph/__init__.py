"""The graph engine: node specs, registry, validation, ordering, caching, execution, events.

This package never imports torch (tests/graph/test_graph_no_torch.py proves it), so it can be
used and tested on its own. Modules, one concept each:

    spec          NodeSpec / InputSpec / OutputSpec / NodeBehaviour (frozen node descriptions)
    native        @node(...) declarations on plain functions
    v1            ComfyUI V1 class -> NodeSpec adapter
    registry      Registry: add_native / add_v1 / add_spec / get / object_info
    object_info   NodeSpec -> ComfyUI /object_info V1 JSON
    packs         load_custom_nodes(registry, dirs, ...) -> [PackResult]
    prompt        DynamicPrompt (prompt + expanded nodes), is_link
    types         wire-type matching (`*`, unions, __ne__-overriding type objects)
    validation    validate_prompt(prompt, registry, ...) -> ValidationResult (ComfyUI error shapes)
    signature     id-free Merkle cache signatures (IS_CHANGED, constants, ancestors)
    cache         CacheConfig and the classic / lru / none / ram strategies
    schedule      which node runs next (topological dissolve, ComfyUI's pick order)
    inputs        argument assembly and list mapping
    results       return values -> outputs, UI, expansions
    expansion     ExecutionBlocker, GraphBuilder
    context       NodeContext (progress, interrupt, env, send), expansion prefix
    events        Event(type, data) with ComfyUI's WebSocket message types and fields
    progress      progress_state bookkeeping (maps built when read) and client pacing
    versions      VersionedMap: past states of a map, each built only when read
    invoke        calling node code with context, hooks and the recover (retry) hook
    relay         delivering events to the caller's event loop, coalesced
    worker        the long-lived prompt thread and its event loop
    settings      RunSettings: what every run of one executor shares (registry, env, hooks, ...)
    objects       ObjectCache: V1 node instances kept across prompts
    spec_index    per-class spec lookups of one run
    node_record   NodeRecord: what one run knows about one node
    consumers     who still needs each node's outputs (frees them for the `none` cache)
    node_step     executing one node: execute_node(view, id) -> StepResult (reads only)
    run           one prompt's run (the main loop; applies each step's result)
    executor      Executor(registry, cache=..., env=..., recover=...).execute(...) -> ExecutionOutcome
                  (imports point one way: executor -> run -> node_step)
    outcome       ExecutionOutcome
    errors        typed exceptions
"""
