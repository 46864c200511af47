"""The catalogue's rules on the stack itself: which stacks are prod, and the strength and the form of the secrets a
person chooses (the config loader sees their decrypted text under `pulumi up`; so does the pack, in PULUMI_CONFIG)."""

from __future__ import annotations

from . import API_KEY_MIN_LENGTH, GRAFANA_PASSWORD_MIN_LENGTH, laxer_environment_problem, pem_problems, weak_secrets
from .rule import EVERY_ENVIRONMENT, PROD, Example, Rule

SECRET = {"secure": "v1:REPLACE-ME"}
# The engine decrypts the stack's config before it starts the analyzers (pulumi/pulumi v3.259.0
# pkg/engine/update.go: `target.Config.Decrypt` into PolicyAnalyzerOptions.Config) and hands it to the pack as
# PULUMI_CONFIG (sdk/go/common/resource/plugin/analyzer_plugin.go constructConfig); the program gets it decrypted too.
DECRYPTED_CONFIG = "the stack's config as the engine decrypts it (PULUMI_CONFIG)"

PROD_BY_STACK_NAME = Rule(
    id="prod-by-stack-name",
    statement="A stack whose name has the word prod or production is prod, and its config cannot make it laxer "
    "(`environment: dev`).",
    reason="The prod rules police the stack config, so the config cannot switch them off: a stack's `environment` "
    "only ever makes it stricter. The name is what the program (`pulumi.get_stack()`) and the pack (PULUMI_STACK, "
    "and each resource's URN `urn:pulumi:<stack>::...`: www.pulumi.com/docs/iac/concepts/resources/names/#urns) both "
    "know for sure; the pack reads `environment` in PULUMI_CONFIG (pulumi/pulumi "
    "sdk/go/common/resource/plugin/analyzer_plugin.go constructEnv). Whatever the config says, both judge such a "
    "stack as prod (rules.environment_of); this rule also refuses the config that says otherwise.",
    environments=PROD,
    config_keys=("environment",),
    plan_fields=("none: the stack's name (PULUMI_STACK, the URNs) and its `environment` (PULUMI_CONFIG)",),
    check=laxer_environment_problem,
    scope="stack",
    passing=(
        Example("a prod stack, environment unset", {}, ()),
        Example("a prod stack that says prod", {"environment": "prod"}, ()),
    ),
    failing=(Example("a prod stack that says dev", {"environment": "dev"}, ()),),
)

PROD_SECRET_STRENGTH = Rule(
    id="prod-secret-strength",
    statement=f"In prod the vLLM API key has at least {API_KEY_MIN_LENGTH} characters and Grafana's admin password "
    f"at least {GRAFANA_PASSWORD_MIN_LENGTH}, and neither is Grafana's default `admin`.",
    reason="Anyone who reaches the proxy's published port may guess the key as often as nginx answers: nginx limits "
    "no attempts unless told to (nginx.org/en/docs/http/ngx_http_limit_req_module.html), so the key carries 128 "
    "bits, 32 characters as `openssl rand -hex 16` prints them. Grafana counts failed logins per user, but `admin` is "
    "its own default (grafana/grafana conf/defaults.ini `admin_password = admin`) and it applies a GF_* variable "
    "only when non-empty. The pack reads the values decrypted: the engine decrypts the config before it starts the "
    "analyzers (pulumi/pulumi v3.259.0 pkg/engine/update.go `target.Config.Decrypt`) and passes it in PULUMI_CONFIG "
    "(sdk/go/common/resource/plugin/analyzer_plugin.go constructConfig). Synth, which cannot decrypt, judges "
    "neither side.",
    environments=PROD,
    config_keys=("vllmApiKey", "grafanaAdminPassword"),
    plan_fields=(f"none: {DECRYPTED_CONFIG}",),
    check=weak_secrets,
    scope="stack",
    passing=(
        Example(
            "a key of 32 characters",
            {"vllmApiKey": SECRET},
            (),
            decrypted={"vllmApiKey": "3f" * 16},
        ),
    ),
    failing=(
        Example("a key of 8 characters", {"vllmApiKey": SECRET}, (), decrypted={"vllmApiKey": "3f" * 4}),
        Example(
            "Grafana's default password",
            {"grafanaAdminPassword": SECRET},
            (),
            decrypted={"grafanaAdminPassword": "admin"},
        ),
    ),
)

CERTIFICATE = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"
TLS = {"vllmApiKey": SECRET, "vllmTlsCertificate": SECRET, "vllmTlsKey": SECRET}

VLLM_TLS_PEM = Rule(
    id="vllm-tls-pem",
    statement="`vllmTlsCertificate` holds a PEM certificate and `vllmTlsKey` a PEM private key, the blocks nginx's "
    "ssl_certificate and ssl_certificate_key read.",
    reason="nginx reads both files as PEM (nginx.org/en/docs/http/ngx_http_ssl_module.html#ssl_certificate: 'a file "
    "with the certificate in the PEM format'); the block labels are RFC 7468's (www.rfc-editor.org/rfc/rfc7468: "
    "CERTIFICATE; PRIVATE KEY for PKCS #8) and OpenSSL's older RSA/EC PRIVATE KEY. A text of another kind fails only "
    "when nginx starts on the host, after the proxy was replaced; refused before, the old proxy keeps serving. The "
    "pack reads the values decrypted in PULUMI_CONFIG (pulumi/pulumi v3.259.0 pkg/engine/update.go).",
    environments=EVERY_ENVIRONMENT,
    config_keys=("vllmTlsCertificate", "vllmTlsKey"),
    plan_fields=(f"none: {DECRYPTED_CONFIG}",),
    check=pem_problems,
    scope="stack",
    passing=(
        Example(
            "a certificate and a PKCS #8 key",
            TLS,
            (),
            decrypted={"vllmApiKey": "3f" * 16, "vllmTlsCertificate": CERTIFICATE, "vllmTlsKey": PRIVATE_KEY},
        ),
    ),
    failing=(
        Example(
            "the two swapped",
            TLS,
            (),
            decrypted={"vllmApiKey": "3f" * 16, "vllmTlsCertificate": PRIVATE_KEY, "vllmTlsKey": CERTIFICATE},
        ),
    ),
)

RULES = (PROD_BY_STACK_NAME, PROD_SECRET_STRENGTH, VLLM_TLS_PEM)
