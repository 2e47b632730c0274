"""Trading a run live or on a replayed feed: feeds, the journal, the broker bridges and the executor.

The executor reuses the agent (``agent.HybridAgent``), the paper broker
(``env.broker.Broker``), the prop-firm account (``env.account.PropFirmAccount``) and the
run layout (``run``): nothing here re-implements fills, rules or file names.
"""
