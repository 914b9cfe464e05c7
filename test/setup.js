// Runs before every test file (vitest.config.js setupFiles): after the file, the temp dirs it
// made with tempDir() go (registered first, this hook runs after the file's own afterAll hooks,
// which stop the daemons and servers using them).
import { afterAll } from 'vitest'
import { removeTempDirs } from './helpers/sidecar.js'

afterAll(removeTempDirs)
