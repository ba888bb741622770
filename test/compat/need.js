'use strict';
// need(name): require an npm package of test/compat, or say how to get it.
// `make run` installs only what the cluster runs (redis-server), so the
// README's node test/compat/... steps may be the first to want these.
module.exports = function need(name) {
  try {
    return require(name);
  } catch (err) {
    if (err.code !== 'MODULE_NOT_FOUND' || !String(err.message).includes(`'${name}'`)) throw err;
    process.stderr.write(`${process.argv[1]}: the npm package ${name} is not installed here.\n` +
      '  Run `make deps` in the repository (it installs Node.js if needed and npm ci in test/compat), then try again.\n');
    process.exit(1);
  }
};
