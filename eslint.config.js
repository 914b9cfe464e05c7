import neostandard from 'neostandard'

export default [
  ...neostandard({ ignores: ['node_modules/**', 'test/harness/hdfs/target/**', 'bench/results/**', 'php-client/vendor/**'] })
]
