"""Team mode: who may do what (public-api.md, "Identity and access").

`rules` (roles, actions, the table), `errors` (the two refusals), `tokens` and `verify` (credentials behind
one Verifier interface), `store` (the AuthWorkflow's directory and audit log), `api` (the Iris API the
controller serves), `remote` and `connect` (the client's side), `bootstrap` (the first admin),
`settings` (the `auth:` config key).
"""
