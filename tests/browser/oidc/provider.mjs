// A real OpenID provider for the admin UI's single sign-on tests: panva's certified `oidc-provider`
// (package.json pins it), on loopback, with static people in groups and the gateway registered as a client.
//
//   node provider.mjs   with ISSUER (e.g. http://localhost:PORT), PORT, GATEWAY (the gateway's URL)
//
// Its signing key is made afresh at every start (a new `kid`): restarting it on the same port is the
// provider rotating its keys while the gateway runs. Test hooks (loopback only, this script's, not the
// library's): POST /test/id-token-ttl?seconds=N sets how long ID tokens live; POST /test/tamper-next-id-token
// flips one character of the next ID token the token endpoint sends (a token altered on its way);
// GET /test/echo shows the query it was called with (the redirect target of the second client).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import http from 'node:http';

import Provider from 'oidc-provider';

const { ISSUER, PORT, GATEWAY } = process.env;
const PASSWORD = 'correct horse'; // every test person's password

// sub → claims. Groups are what [admin_ui.oidc.roles] maps to roles.
const PEOPLE = {
  alice: { email: 'alice@example.com', name: 'Alice Admin', groups: ['ops-admins', 'everyone'] },
  victor: { email: 'victor@example.com', name: 'Victor Viewer', groups: ['auditors', 'everyone'] },
  tara: { email: 'tara@example.com', name: 'Tara Tenant', groups: ['team-blue-leads', 'everyone'] },
  nobody: { email: 'nobody@example.com', name: 'Nora Nogroup', groups: ['everyone'] },
};

function signingKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), use: 'sig', alg: 'RS256' };
}

let idTokenTtl = 3600;
let tamperNext = false;

const page = (title, body) => `<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>${title}</title><link rel="icon" href="data:,"></head><body><main><h1>${title}</h1>${body}</main></body></html>`;

const provider = new Provider(ISSUER, {
  clients: [
    {
      client_id: 'tiergate',
      client_secret: 'tiergate-test-secret',
      redirect_uris: [`${GATEWAY}/admin/oidc/callback`],
      post_logout_redirect_uris: [`${GATEWAY}/admin/login`],
      grant_types: ['authorization_code'],
      response_types: ['code'],
    },
    {
      client_id: 'other-app',
      client_secret: 'other-app-secret',
      redirect_uris: [`${ISSUER}/test/echo`],
      grant_types: ['authorization_code'],
      response_types: ['code'],
    },
  ],
  jwks: { keys: [signingKey()] },
  cookies: { keys: [randomUUID()] },
  pkce: { required: () => true },
  scopes: ['openid', 'email', 'profile', 'groups'],
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
  conformIdTokenClaims: false, // the groups go into the ID token, as Okta/Entra/Keycloak can be set to do
  ttl: {
    IdToken: () => idTokenTtl,
    AccessToken: () => 600,
    AuthorizationCode: () => 60,
    Interaction: () => 600,
    Session: () => 3600,
    Grant: () => 3600,
  },
  async findAccount(ctx, sub) {
    const person = PEOPLE[sub];
    if (!person) return undefined;
    return { accountId: sub, claims: async () => ({ sub, email_verified: true, ...person }) };
  },
  // Every client here is first-party: the grant is given without a consent screen.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    await grant.save();
    return grant;
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      async logoutSource(ctx, form) {
        ctx.body = page('Sign out of the test provider?', `${form}<button form="op.logoutForm" name="logout" value="yes" type="submit">Yes, sign me out</button>`);
      },
      async postLogoutSuccessSource(ctx) {
        ctx.body = page('Signed out', '<p>You are signed out of the test provider.</p>');
      },
    },
  },
  async renderError(ctx, out) {
    ctx.type = 'html';
    ctx.body = page('Provider error', `<pre id="error">${String(out.error)}: ${String(out.error_description || '')}</pre>`);
  },
});

// The tamper hook: after the token endpoint made its answer, alter the ID token in it.
provider.use(async (ctx, next) => {
  await next();
  if (ctx.path === '/token' && tamperNext && ctx.body && typeof ctx.body.id_token === 'string') {
    tamperNext = false;
    const [head, payload, sig] = ctx.body.id_token.split('.');
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    claims.groups = ['ops-admins']; // a viewer's token made to say "admin"
    ctx.body = { ...ctx.body, id_token: [head, Buffer.from(JSON.stringify(claims)).toString('base64url'), sig].join('.') };
  }
});

async function readForm(req) {
  let body = '';
  for await (const chunk of req) body += chunk;
  return new URLSearchParams(body);
}

async function interaction(req, res, uid, url) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  if (req.method === 'GET') {
    const error = url.searchParams.get('error') ? '<p id="error" role="alert">Wrong login or password.</p>' : '';
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end(page('Sign in to the test provider', `${error}<form method="post" action="/interaction/${uid}/login">
<label>Login <input id="login" name="login" autocomplete="username"></label>
<label>Password <input id="password" name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Sign in</button></form>`));
    return;
  }
  const form = await readForm(req);
  const login = form.get('login') || '';
  if (!PEOPLE[login] || form.get('password') !== PASSWORD) {
    res.writeHead(303, { location: `/interaction/${uid}?error=1` });
    res.end();
    return;
  }
  await provider.interactionFinished(req, res, { login: { accountId: login } }, { mergeWithLastSubmission: false });
}

const callback = provider.callback();
const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, ISSUER);
  try {
    const match = url.pathname.match(/^\/interaction\/([^/]+)(\/login)?$/);
    if (match) return await interaction(req, res, match[1], url);
    if (url.pathname === '/test/id-token-ttl' && req.method === 'POST') {
      idTokenTtl = Number(url.searchParams.get('seconds'));
      return res.end('ok');
    }
    if (url.pathname === '/test/tamper-next-id-token' && req.method === 'POST') {
      tamperNext = true;
      return res.end('ok');
    }
    if (url.pathname === '/favicon.ico') {
      res.statusCode = 204;
      return res.end();
    }
    if (url.pathname === '/test/echo') {
      res.setHeader('content-type', 'application/json');
      return res.end(JSON.stringify(Object.fromEntries(url.searchParams)));
    }
    return callback(req, res);
  } catch (err) {
    res.statusCode = 500;
    res.end(String(err));
  }
});
server.listen(Number(PORT), '127.0.0.1', () => console.log(`provider ready on ${ISSUER}`));
