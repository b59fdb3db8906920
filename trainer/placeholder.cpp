// placeholder until trainer lands
